package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/errcode/wire"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

func newOffsetsCommand(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "offsets", Short: "Read, reset and delete a group's committed offsets"}
	c.AddCommand(offsetsGetCommand(g), offsetsResetCommand(g), offsetsDeleteCommand(g))
	return c
}

func offsetsGetCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "get GROUP",
		Short:   "Show a group's committed offsets",
		Example: `  cohortctl offsets get orders`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			var resp *cohortv1.OffsetFetchResponse
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				partitions, err := client.FetchOffsets(ctx, cohortv1.NewGroupCoordinatorClient(conn), &cohortv1.OffsetFetchRequest{GroupId: args[0]})
				resp = &cohortv1.OffsetFetchResponse{Partitions: partitions}
				return err
			})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(g.out(cmd), resp)
			}
			rows := make([][]string, 0, len(resp.GetPartitions()))
			for _, p := range resp.GetPartitions() {
				when := "-"
				if ts := p.GetCommitTimestampMs(); ts > 0 {
					when = time.UnixMilli(ts).UTC().Format(time.RFC3339)
				}
				rows = append(rows, []string{args[0], p.GetTopic(), strconv.Itoa(int(p.GetPartition())), strconv.FormatInt(p.GetOffset(), 10), dash(p.GetMetadata()), when})
			}
			return table(g.out(cmd), []string{"GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "METADATA", "COMMITTED"}, rows)
		},
	}
}

func offsetsResetCommand(g *globals) *cobra.Command {
	var topic string
	var to int64
	var partitions []int
	c := &cobra.Command{
		Use:   "reset GROUP --topic TOPIC --to OFFSET",
		Short: "Set a group's committed offsets (only while the group has no members)",
		Long: `Set the committed offset of a topic's partitions (all, or --partitions) for a
group. As in Kafka, only a group without members can be reset: stop its
consumers first. The commit is a standalone commit (generation -1), which
the cluster refuses once the group has members again.`,
		Example: `  cohortctl offsets reset orders --topic payments --to 0
  cohortctl offsets reset orders --topic payments --to 1200 --partitions 0,3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group := args[0]
			if topic == "" {
				return errors.New("--topic is required")
			}
			if !cmd.Flags().Changed("to") || to < 0 {
				return errors.New("--to OFFSET (>= 0) is required")
			}
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			var resp *cohortv1.OffsetCommitResponse
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				gc := cohortv1.NewGroupCoordinatorClient(conn)
				desc, err := gc.DescribeGroups(ctx, &cohortv1.DescribeGroupsRequest{GroupIds: []string{group}}) // one group: one page
				if err != nil {
					return err
				}
				for _, gr := range desc.GetGroups() {
					if st := gr.GetState(); st != "Empty" && st != "Dead" {
						return fmt.Errorf("group %s is %s with %d members: offsets can only be reset while it has no members; stop its consumers first",
							group, st, len(gr.GetMembers()))
					}
				}
				parts, err := topicPartitions(ctx, conn, topic, partitions)
				if err != nil {
					return err
				}
				req := &cohortv1.OffsetCommitRequest{GroupId: group, Generation: -1}
				for _, p := range parts {
					req.Offsets = append(req.Offsets, &cohortv1.OffsetCommitPartition{Topic: topic, Partition: int32(p), Offset: to})
				}
				resp, err = gc.OffsetCommit(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			return printPartitionResults(g, cmd, group, resp, resp.GetPartitions(), "reset to "+strconv.FormatInt(to, 10), "not reset")
		},
	}
	c.Flags().StringVar(&topic, "topic", "", "the topic (required)")
	c.Flags().Int64Var(&to, "to", -1, "the offset to set (required)")
	c.Flags().IntSliceVar(&partitions, "partitions", nil, "only these partitions (default: all of the topic's)")
	return c
}

// topicPartitions are the partitions given, or every partition of topic.
func topicPartitions(ctx context.Context, conn *grpc.ClientConn, topic string, given []int) ([]int, error) {
	if len(given) > 0 {
		return given, nil
	}
	topics, err := client.ListTopics(ctx, cohortv1.NewTopicsClient(conn), &cohortv1.ListTopicsRequest{})
	if err != nil {
		return nil, err
	}
	var parts []int
	for _, t := range topics {
		if t.GetTopic() == topic {
			for p := range t.GetPartitions() {
				parts = append(parts, int(p))
			}
		}
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("topic %q does not exist", topic)
	}
	return parts, nil
}

func offsetsDeleteCommand(g *globals) *cobra.Command {
	var topic string
	var partitions []int
	c := &cobra.Command{
		Use:   "delete GROUP --topic TOPIC",
		Short: "Delete a group's committed offsets of a topic (Kafka's OffsetDelete)",
		Long: `Delete the committed offsets of a topic's partitions (all, or --partitions)
for a group. As in Kafka, the offsets of a topic the group's members
subscribe to stay (GROUP_SUBSCRIBED_TO_TOPIC); a partition without an offset
is deleted trivially. Admins only.`,
		Example: `  cohortctl offsets delete orders --topic payments
  cohortctl offsets delete orders --topic payments --partitions 0,3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group := args[0]
			if topic == "" {
				return errors.New("--topic is required")
			}
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			var resp *cohortv1.DeleteOffsetsResponse
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				parts, err := topicPartitions(ctx, conn, topic, partitions)
				if err != nil {
					return err
				}
				req := &cohortv1.DeleteOffsetsRequest{GroupId: group, Partitions: []*cohortv1.TopicPartitions{{Topic: topic}}}
				for _, p := range parts {
					req.Partitions[0].Partitions = append(req.Partitions[0].Partitions, int32(p))
				}
				resp, err = cohortv1.NewGroupCoordinatorClient(conn).DeleteOffsets(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			return printPartitionResults(g, cmd, group, resp, resp.GetPartitions(), "deleted", "not deleted")
		},
	}
	c.Flags().StringVar(&topic, "topic", "", "the topic (required)")
	c.Flags().IntSliceVar(&partitions, "partitions", nil, "only these partitions (default: all of the topic's)")
	return c
}

// partitionResult is one partition's outcome in an offsets answer.
type partitionResult interface {
	GetTopic() string
	GetPartition() int32
	GetError() cohortv1.ErrorCode
	GetErrorMessage() string
}

// printPartitionResults prints an offsets answer (resp as JSON, or a table
// saying done for each partition that succeeded) and fails, saying
// notDone, when a partition did not succeed.
func printPartitionResults[R partitionResult](g *globals, cmd *cobra.Command, group string, resp any, results []R, done, notDone string) error {
	var rows [][]string
	var failed []string
	for _, p := range results {
		res := done
		if p.GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
			code, _ := wire.FromEnum(p.GetError())
			res = fmt.Sprintf("%s: %s", code, p.GetErrorMessage())
			failed = append(failed, fmt.Sprintf("%s-%d (%s)", p.GetTopic(), p.GetPartition(), res))
		}
		rows = append(rows, []string{group, p.GetTopic(), strconv.Itoa(int(p.GetPartition())), res})
	}
	var err error
	if g.output == "json" {
		err = printJSON(g.out(cmd), resp)
	} else {
		err = table(g.out(cmd), []string{"GROUP", "TOPIC", "PARTITION", "RESULT"}, rows)
	}
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("%s: %s", notDone, strings.Join(failed, ", "))
	}
	return nil
}
