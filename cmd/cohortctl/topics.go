package main

import (
	"fmt"
	"strconv"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

func newTopicsCommand(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "topics", Short: "Create, list and delete topics, add partitions"}
	c.AddCommand(topicsCreateCommand(g), topicsListCommand(g), topicsDeleteCommand(g), topicsAddPartitionsCommand(g))
	return c
}

func (g *globals) topicChange(cmd *cobra.Command, op, name string, call func(tc cohortv1.TopicsClient) error, msg string) error {
	ctx, cancel := g.ctx(cmd)
	defer cancel()
	err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
		tc := cohortv1.NewTopicsClient(conn)
		return call(tc)
	})
	if err != nil {
		return err
	}
	return g.printChange(cmd, changeResult{Operation: op, NodeID: "", Changed: true, Message: msg})
}

func topicsCreateCommand(g *globals) *cobra.Command {
	var partitions int32
	c := &cobra.Command{
		Use: "create TOPIC --partitions N", Short: "Create a topic", Args: cobra.ExactArgs(1),
		Example: `  cohortctl topics create orders --partitions 12`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			return g.topicChange(cmd, "create", args[0], func(tc cohortv1.TopicsClient) error {
				_, err := tc.CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: args[0], Partitions: partitions})
				return err
			}, fmt.Sprintf("created topic %s with %d partitions", args[0], partitions))
		},
	}
	c.Flags().Int32Var(&partitions, "partitions", 1, "number of partitions")
	return c
}

func topicsListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "list", Short: "List topics and their partition counts", Args: cobra.NoArgs,
		Example: `  cohortctl topics list -o json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			var resp *cohortv1.ListTopicsResponse
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				topics, err := client.ListTopics(ctx, cohortv1.NewTopicsClient(conn), &cohortv1.ListTopicsRequest{})
				resp = &cohortv1.ListTopicsResponse{Topics: topics}
				return err
			})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(g.out(cmd), resp)
			}
			rows := make([][]string, 0, len(resp.GetTopics()))
			for _, t := range resp.GetTopics() {
				rows = append(rows, []string{t.GetTopic(), strconv.Itoa(int(t.GetPartitions()))})
			}
			return table(g.out(cmd), []string{"TOPIC", "PARTITIONS"}, rows)
		},
	}
}

func topicsDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "delete TOPIC", Short: "Delete a topic", Args: cobra.ExactArgs(1),
		Example: `  cohortctl topics delete orders-old`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			return g.topicChange(cmd, "delete", args[0], func(tc cohortv1.TopicsClient) error {
				_, err := tc.DeleteTopic(ctx, &cohortv1.DeleteTopicRequest{Name: args[0]})
				return err
			}, "deleted topic "+args[0])
		},
	}
}

func topicsAddPartitionsCommand(g *globals) *cobra.Command {
	var partitions int32
	c := &cobra.Command{
		Use: "add-partitions TOPIC --partitions N", Short: "Raise a topic's partition count to N", Args: cobra.ExactArgs(1),
		Example: `  cohortctl topics add-partitions orders --partitions 24`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if partitions <= 0 {
				return fmt.Errorf("--partitions N (the new total) is required")
			}
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			return g.topicChange(cmd, "add-partitions", args[0], func(tc cohortv1.TopicsClient) error {
				_, err := tc.AddPartitions(ctx, &cohortv1.AddPartitionsRequest{Name: args[0], Partitions: partitions})
				return err
			}, fmt.Sprintf("topic %s now has %d partitions", args[0], partitions))
		},
	}
	c.Flags().Int32Var(&partitions, "partitions", 0, "the new total number of partitions")
	return c
}
