package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// A member joins group "billing", is told its partitions of "orders" on
// every rebalance, and leaves the group on Ctrl-C. examples/worker is the
// same program, runnable.
func ExampleNewMember() {
	m, err := client.NewMember(client.Config{
		Endpoints: []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"},
		GroupID:   "billing",
		Topics:    []string{"orders"},
		OnAssigned: func(_ context.Context, generation int32, assignment []client.TopicPartition) {
			fmt.Printf("generation %d: start %v\n", generation, assignment)
		},
		OnRevoked: func(_ context.Context, revoked []client.TopicPartition) {
			// The last moment to commit offsets for these partitions.
			fmt.Printf("stop %v\n", revoked)
		},
	})
	if err != nil {
		log.Fatal(err) // an invalid Config: nothing was sent yet
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// Run returns once ctx ends, after revoking the partitions and leaving
	// the group, so the others take them over at once.
	if err := m.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

// Commit stores, for each partition, the offset of the next record to
// process, with the member's current generation; the coordinator refuses it
// for partitions the member does not own in that generation.
func ExampleMember_Commit() {
	assigned := make(chan struct{}, 1)
	m, err := client.NewMember(client.Config{
		Endpoints: []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"},
		GroupID:   "billing",
		Topics:    []string{"orders"},
		OnAssigned: func(context.Context, int32, []client.TopicPartition) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = m.Run(context.Background()) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Close(ctx) // leaves the group
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-assigned:
	case <-ctx.Done():
		log.Fatal("no assignment within 30s")
	}
	var offsets []client.PartitionOffset
	for _, tp := range m.Assignment() {
		offsets = append(offsets, client.PartitionOffset{TopicPartition: tp, Offset: 42})
	}
	err = m.Commit(ctx, offsets)
	var partial *client.CommitError
	switch {
	case err == nil:
	case errors.Is(err, client.ErrRebalanceInProgress), errors.Is(err, client.ErrIllegalGeneration):
		// A rebalance began: the partitions may have moved. Commit again
		// for what the next OnAssigned hands out.
	case errors.As(err, &partial):
		// The other partitions were stored.
		for tp, perr := range partial.Partitions {
			fmt.Printf("%v not committed: %s\n", tp, client.Reason(perr))
		}
	default:
		log.Fatal(err)
	}
}

// A Conn is the endpoint-aware connection under a Member; the generated
// clients run on it directly and follow the leader the cluster names, for
// administrative calls such as creating a topic or reading offsets.
func ExampleDial() {
	conn, err := client.Dial(client.ConnConfig{
		Endpoints: []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "orders", Partitions: 12})
	if err != nil && client.Reason(err) != "TOPIC_ALREADY_EXISTS" {
		log.Fatal(err)
	}
	resp, err := conn.Groups().OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range resp.GetPartitions() {
		fmt.Printf("%s/%d: %d\n", p.GetTopic(), p.GetPartition(), p.GetOffset())
	}
}
