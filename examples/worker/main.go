// Command worker is the smallest complete Cohort consumer: it joins a
// consumer group with the Go client library (package client), prints its
// partitions on every rebalance, "processes" each partition it owns by
// committing an advancing offset every --commit-interval, resumes from the
// committed offset when a partition moves to it, and on Ctrl-C (SIGINT or
// SIGTERM) leaves the group so the others take its partitions at once.
//
//	make run   # in another terminal: three nodes on 127.0.0.1:9001-9003
//	go run ./examples/worker --group g --topic t --create-topic-partitions 4
//
// Start a second worker with the same flags and watch both rebalance; stop
// one with Ctrl-C and the other takes its partitions over at the offsets it
// committed.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func main() {
	var (
		group      = flag.String("group", "", "consumer group to join (required)")
		topic      = flag.String("topic", "", "topic to consume (required)")
		endpoints  = flag.String("endpoints", cmp.Or(os.Getenv("COHORT_ENDPOINTS"), "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003"), "gRPC addresses of Cohort nodes, comma-separated (env COHORT_ENDPOINTS)")
		instanceID = flag.String("instance-id", "", "static member ID (KIP-345); a restart within the session timeout keeps the partitions")
		assignor   = flag.String("assignor", "", "assignor: range, roundrobin, sticky, cooperative-sticky, consistent-hash (default roundrobin, range)")
		interval   = flag.Duration("commit-interval", time.Second, "how often to commit the simulated progress")
		partitions = flag.Int("create-topic-partitions", 0, "create the topic with this many partitions first (0: don't; needs an admin credential on a secured cluster)")
		tlsCA      = flag.String("tls-ca", os.Getenv("COHORT_TLS_CA"), "CA bundle of the cluster's TLS certificates (env COHORT_TLS_CA; empty: plaintext)")
		tlsCert    = flag.String("tls-cert", os.Getenv("COHORT_TLS_CERT"), "this worker's client certificate (env COHORT_TLS_CERT)")
		tlsKey     = flag.String("tls-key", os.Getenv("COHORT_TLS_KEY"), "key of --tls-cert (env COHORT_TLS_KEY)")
	)
	flag.Parse()
	if *group == "" || *topic == "" {
		flag.Usage()
		os.Exit(2)
	}
	out := log.New(os.Stdout, "", log.Ltime)

	cfg := client.Config{
		Endpoints:  strings.Split(*endpoints, ","),
		GroupID:    *group,
		InstanceID: *instanceID,
		ClientID:   "examples/worker",
		Topics:     []string{*topic},
		// A static member leaves on Close too: this worker stops for good.
		LeaveStaticOnClose: true,
		// Retries and a failed leave are warnings; info logs each step.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if *assignor != "" {
		cfg.Protocols = []string{*assignor}
	}
	if *tlsCA != "" {
		tc, err := client.LoadTLS(*tlsCert, *tlsKey, *tlsCA)
		if err != nil {
			log.Fatal(err)
		}
		cfg.Credentials.TLS = tc
	}
	var m *client.Member
	// The callbacks run on the member's goroutine, one at a time, in order.
	cfg.OnAssigned = func(_ context.Context, generation int32, _ []client.TopicPartition) {
		// Assignment is everything held (with cooperative-sticky the
		// callback's argument is only what this generation added).
		held := m.Assignment()
		if len(held) == 0 {
			out.Printf("generation %d: no partitions (if topic %s does not exist, create it: --create-topic-partitions N)", generation, *topic)
			return
		}
		out.Printf("generation %d: assigned %s (%d partitions)", generation, join(held), len(held))
	}
	cfg.OnRevoked = func(_ context.Context, revoked []client.TopicPartition) {
		if len(revoked) > 0 {
			out.Printf("revoked %s", join(revoked))
		}
	}
	m, err := client.NewMember(cfg)
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *partitions > 0 {
		// The member's Conn follows the leader like the member does.
		_, err := m.Conn().Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: *topic, Partitions: int32(*partitions)})
		switch {
		case ctx.Err() != nil:
			return
		case client.ErrorCode(err) == errcode.TopicAlreadyExists:
			out.Printf("topic %s already exists with another partition count; using it", *topic)
		case err != nil:
			log.Fatalf("create topic %s: %v", *topic, err)
		default:
			out.Printf("topic %s has %d partitions", *topic, *partitions)
		}
	}

	out.Printf("joining group %s (topic %s) via %s; Ctrl-C leaves", *group, *topic, *endpoints)
	// Run is independent of ctx: on a signal, Close stops it and leaves.
	ran := make(chan error, 1)
	go func() { ran <- m.Run(context.Background()) }()

	next := map[client.TopicPartition]int64{} // offsets to commit next
	generation := client.NoGeneration         // the one next was read for
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case err := <-ran: // a fatal error: fenced, bad config, refused
			log.Fatalf("member stopped: %v", err)
		case <-ctx.Done():
			closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := m.Close(closeCtx); err != nil {
				log.Fatalf("leave group %s: %v", *group, err)
			}
			out.Printf("left group %s", *group)
			return
		case <-tick.C:
		}
		held, gen := m.Assignment(), m.Generation()
		if len(held) == 0 {
			continue
		}
		if gen != generation {
			// A rebalance: continue every partition where its last owner
			// (maybe this worker) committed.
			if next, err = committed(ctx, m.Conn(), *group, held); err != nil {
				out.Printf("fetch offsets: %v", err)
				continue
			}
			generation = gen
		}
		offsets := make([]client.PartitionOffset, 0, len(held))
		var done []string
		for _, tp := range held {
			next[tp] += 10 // "processed" ten records
			offsets = append(offsets, client.PartitionOffset{TopicPartition: tp, Offset: next[tp]})
			done = append(done, fmt.Sprintf("%s=%d", tp, next[tp]))
		}
		if err := m.Commit(ctx, offsets); err != nil {
			if ctx.Err() == nil {
				// Typically a rebalance began: the next sync says what to
				// process, and the offsets are read again.
				out.Printf("commit refused: %v", err)
				generation = client.NoGeneration
			}
			continue
		}
		out.Printf("generation %d: committed %s", gen, strings.Join(done, " "))
	}
}

// committed returns the group's committed offset for each partition, 0 for
// partitions with none.
func committed(ctx context.Context, conn *client.Conn, group string, tps []client.TopicPartition) (map[client.TopicPartition]int64, error) {
	req := &cohortv1.OffsetFetchRequest{GroupId: group}
	for _, tp := range tps {
		req.Partitions = append(req.Partitions, &cohortv1.TopicPartitions{Topic: tp.Topic, Partitions: []int32{tp.Partition}})
	}
	// The answer is paged: FetchOffsets follows every page.
	fetched, err := client.FetchOffsets(ctx, conn.Groups(), req)
	if err != nil {
		return nil, err
	}
	next := make(map[client.TopicPartition]int64, len(tps))
	for _, p := range fetched {
		next[client.TopicPartition{Topic: p.GetTopic(), Partition: p.GetPartition()}] = max(p.GetOffset(), 0)
	}
	return next, nil
}

func join(tps []client.TopicPartition) string {
	s := make([]string, len(tps))
	for i, tp := range tps {
		s[i] = tp.String()
	}
	return strings.Join(s, " ")
}
