package main

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cohortlabs/cohort/client"
	"github.com/cohortlabs/cohort/errcode/wire"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

func newGroupsCommand(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "groups",
		Short: "List, describe and delete consumer groups",
		Long: `List, describe and delete consumer groups, with the columns of Kafka's
kafka-consumer-groups.sh.`,
	}
	c.AddCommand(groupsListCommand(g), groupsDescribeCommand(g), groupsDeleteCommand(g))
	return c
}

func groupsListCommand(g *globals) *cobra.Command {
	var states []string
	c := &cobra.Command{
		Use:   "list",
		Short: "List consumer groups",
		Example: `  cohortctl groups list
  cohortctl groups list --state Stable,PreparingRebalance -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			var resp *cohortv1.ListGroupsResponse
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				groups, err := client.ListGroups(ctx, cohortv1.NewGroupCoordinatorClient(conn), &cohortv1.ListGroupsRequest{States: states})
				resp = &cohortv1.ListGroupsResponse{Groups: groups}
				return err
			})
			if err != nil {
				return err
			}
			groups := resp.GetGroups()
			slices.SortFunc(groups, func(a, b *cohortv1.ListedGroup) int { return cmp.Compare(a.GetGroupId(), b.GetGroupId()) })
			if g.output == "json" {
				return printJSON(g.out(cmd), resp)
			}
			rows := make([][]string, 0, len(groups))
			for _, gr := range groups {
				rows = append(rows, []string{gr.GetGroupId(), gr.GetState(), dash(gr.GetProtocol()),
					strconv.Itoa(int(gr.GetGeneration())), strconv.Itoa(int(gr.GetMembers()))})
			}
			return table(g.out(cmd), []string{"GROUP", "STATE", "PROTOCOL", "GENERATION", "#MEMBERS"}, rows)
		},
	}
	c.Flags().StringSliceVar(&states, "state", nil, "only groups in these states (Empty, PreparingRebalance, CompletingRebalance, Stable)")
	return c
}

func groupsDescribeCommand(g *globals) *cobra.Command {
	var members, state bool
	c := &cobra.Command{
		Use:   "describe GROUP...",
		Short: "Describe groups: offsets and owners per partition, members (--members) or state (--state)",
		Long: `Describe groups. By default one row per partition the group owns or has
committed: GROUP TOPIC PARTITION CURRENT-OFFSET CONSUMER-ID HOST CLIENT-ID.
--members lists the members, --state the group's state, as Kafka's
kafka-consumer-groups.sh --describe does.`,
		Example: `  cohortctl groups describe orders
  cohortctl groups describe orders --members
  cohortctl groups describe orders --state -o json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if members && state {
				return errors.New("--members and --state are exclusive")
			}
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			var desc *cohortv1.DescribeGroupsResponse
			offsets := map[string][]*cohortv1.OffsetFetchPartition{}
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				gc := cohortv1.NewGroupCoordinatorClient(conn)
				groups, err := client.DescribeGroups(ctx, gc, &cohortv1.DescribeGroupsRequest{GroupIds: args})
				if err != nil {
					return err
				}
				desc = &cohortv1.DescribeGroupsResponse{Groups: groups}
				if members || state {
					return nil
				}
				for _, id := range args {
					o, err := client.FetchOffsets(ctx, gc, &cohortv1.OffsetFetchRequest{GroupId: id})
					if err != nil {
						return err
					}
					offsets[id] = o
				}
				return nil
			})
			if err != nil {
				return err
			}
			var missing []string
			for _, gr := range desc.GetGroups() {
				if gr.GetState() == "Dead" && len(offsets[gr.GetGroupId()]) == 0 {
					missing = append(missing, gr.GetGroupId())
				}
			}
			switch {
			case g.output == "json" && (members || state):
				err = printJSON(g.out(cmd), desc)
			case g.output == "json":
				type out struct {
					Group   any `json:"group"`
					Offsets any `json:"offsets"`
				}
				var all []out
				for _, gr := range desc.GetGroups() {
					all = append(all, out{protoJSON(gr), protoJSON(&cohortv1.OffsetFetchResponse{Partitions: offsets[gr.GetGroupId()]})})
				}
				err = printJSON(g.out(cmd), all)
			case members:
				var rows [][]string
				for _, gr := range desc.GetGroups() {
					for _, m := range gr.GetMembers() {
						n := 0
						var parts []string
						for _, tp := range m.GetAssignment().GetTopics() {
							n += len(tp.GetPartitions())
							parts = append(parts, fmt.Sprintf("%s%v", tp.GetTopic(), tp.GetPartitions()))
						}
						rows = append(rows, []string{gr.GetGroupId(), m.GetMemberId(), dash(m.GetInstanceId()), dash(m.GetClientHost()),
							dash(m.GetClientId()), strconv.Itoa(n), dash(strings.Join(parts, " "))})
					}
				}
				err = table(g.out(cmd), []string{"GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"}, rows)
			case state:
				var rows [][]string
				for _, gr := range desc.GetGroups() {
					rows = append(rows, []string{gr.GetGroupId(), dash(gr.GetProtocol()), gr.GetState(), strconv.Itoa(int(gr.GetGeneration())),
						dash(gr.GetLeaderId()), strconv.Itoa(len(gr.GetMembers()))})
				}
				err = table(g.out(cmd), []string{"GROUP", "ASSIGNMENT-STRATEGY", "STATE", "GENERATION", "LEADER", "#MEMBERS"}, rows)
			default:
				err = table(g.out(cmd), []string{"GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "CONSUMER-ID", "HOST", "CLIENT-ID"},
					partitionRows(desc.GetGroups(), offsets))
			}
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				return fmt.Errorf("no such group: %s", strings.Join(missing, ", "))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&members, "members", false, "list the members")
	c.Flags().BoolVar(&state, "state", false, "show the group's state")
	return c
}

// partitionRows is Kafka's --describe view: every partition that is
// assigned or has a committed offset, with its owner.
func partitionRows(groups []*cohortv1.GroupDescription, offsets map[string][]*cohortv1.OffsetFetchPartition) [][]string {
	type key struct {
		topic string
		part  int32
	}
	var rows [][]string
	for _, gr := range groups {
		owner := map[key]*cohortv1.GroupMemberDescription{}
		committed := map[key]int64{}
		var keys []key
		for _, m := range gr.GetMembers() {
			for _, tp := range m.GetAssignment().GetTopics() {
				for _, p := range tp.GetPartitions() {
					k := key{tp.GetTopic(), p}
					owner[k] = m
					keys = append(keys, k)
				}
			}
		}
		for _, o := range offsets[gr.GetGroupId()] {
			k := key{o.GetTopic(), o.GetPartition()}
			if _, ok := owner[k]; !ok {
				if _, seen := committed[k]; !seen {
					keys = append(keys, k)
				}
			}
			committed[k] = o.GetOffset()
		}
		slices.SortFunc(keys, func(a, b key) int {
			return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.part, b.part))
		})
		keys = slices.Compact(keys)
		for _, k := range keys {
			off := "-"
			if v, ok := committed[k]; ok && v >= 0 {
				off = strconv.FormatInt(v, 10)
			}
			id, host, client := "-", "-", "-"
			if m := owner[k]; m != nil {
				id, host, client = m.GetMemberId(), dash(m.GetClientHost()), dash(m.GetClientId())
			}
			rows = append(rows, []string{gr.GetGroupId(), k.topic, strconv.Itoa(int(k.part)), off, id, host, client})
		}
	}
	return rows
}

func groupsDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "delete GROUP...",
		Short:   "Delete empty groups and their committed offsets",
		Example: `  cohortctl groups delete orders-old`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := g.ctx(cmd)
			defer cancel()
			var resp *cohortv1.DeleteGroupsResponse
			err := g.withEndpoint(ctx, func(conn *grpc.ClientConn) error {
				var err error
				resp, err = cohortv1.NewGroupCoordinatorClient(conn).DeleteGroups(ctx, &cohortv1.DeleteGroupsRequest{GroupIds: args})
				return err
			})
			if err != nil {
				return err
			}
			var failed []string
			var rows [][]string
			for _, r := range resp.GetGroups() {
				res := "deleted"
				if r.GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
					code, _ := wire.FromEnum(r.GetError())
					res = fmt.Sprintf("%s: %s", code, r.GetErrorMessage())
					failed = append(failed, r.GetGroupId()+" ("+res+")")
				}
				rows = append(rows, []string{r.GetGroupId(), res})
			}
			if g.output == "json" {
				err = printJSON(g.out(cmd), resp)
			} else {
				err = table(g.out(cmd), []string{"GROUP", "RESULT"}, rows)
			}
			if err != nil {
				return err
			}
			if len(failed) > 0 {
				return fmt.Errorf("not deleted: %s", strings.Join(failed, ", "))
			}
			return nil
		},
	}
}
