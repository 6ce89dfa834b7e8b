package coordinator_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cohortlabs/cohort/client"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
	"github.com/cohortlabs/cohort/internal/testcluster"
)

// standaloneCommit commits offset for every partition of topic with the
// given metadata, as `cohortctl offsets reset` does (no members), in
// requests of at most commitChunk partitions.
func standaloneCommit(t *testing.T, g cohortv1.GroupCoordinatorClient, group, topic string, partitions int32, offset int64, metadata string) {
	t.Helper()
	for from := int32(0); from < partitions; from += commitChunk {
		req := &cohortv1.OffsetCommitRequest{GroupId: group, Generation: -1}
		for p := from; p < min(from+commitChunk, partitions); p++ {
			req.Offsets = append(req.Offsets, &cohortv1.OffsetCommitPartition{Topic: topic, Partition: p, Offset: offset, Metadata: metadata})
		}
		resp, err := g.OffsetCommit(testCtx(t), req)
		if err != nil {
			t.Fatalf("commit %s from partition %d: %v", topic, from, err)
		}
		for _, p := range resp.GetPartitions() {
			if p.GetError() != cohortv1.ErrorCode_ERROR_CODE_NONE {
				t.Fatalf("commit %s-%d: %v %s", p.GetTopic(), p.GetPartition(), p.GetError(), p.GetErrorMessage())
			}
		}
	}
}

// commitChunk bounds the partitions of one commit request: 900 partitions
// of 4 KiB metadata make a 3.6 MB entry, which the race detector's build
// took 17–36 s to replicate on a two-core machine (its range checks over
// every copy of the entry), past Raft's timeouts, so the cluster lost its
// leader; 300 take about 1.5 s.
const commitChunk = 300

// Five commits of 900 partitions with 4 KiB of metadata fill a group's
// offsets budget (4,500 here) with 18 MB of offsets: OffsetFetch answers
// them in pages that each fit gRPC's default 4 MiB receive limit (the test
// connections keep it), across a leader change in the middle of the walk.
func TestOffsetFetch_GroupAtOffsetsBudget_PagedAcrossLeaderChange(t *testing.T) {
	const topics, partitions = 5, 900
	cfg := testcluster.DefaultCoordinator()
	cfg.Budgets.OffsetsPerGroup = topics * partitions
	c := testcluster.Start(t, 3, testcluster.Options{Coordinator: cfg})
	ctx := testCtx(t)
	// Writes go through a client.Conn, which resends them to a new leader
	// should leadership move under the load of the test run.
	conn, err := client.Dial(client.ConnConfig{Endpoints: c.Addrs(), RequestTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	metadata := strings.Repeat("m", 4096)
	for i := range topics {
		topic := fmt.Sprintf("t%d", i)
		if _, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: topic, Partitions: partitions}); err != nil {
			t.Fatalf("create %s: %v", topic, err)
		}
		standaloneCommit(t, conn.Groups(), "full", topic, partitions, int64(i), metadata)
	}
	// The group is at its budget: one more offset is refused.
	if _, err := conn.Topics().CreateTopic(ctx, &cohortv1.CreateTopicRequest{Name: "extra", Partitions: 1}); err != nil {
		t.Fatalf("create extra: %v", err)
	}
	resp, err := conn.Groups().OffsetCommit(ctx, &cohortv1.OffsetCommitRequest{GroupId: "full", Generation: -1,
		Offsets: []*cohortv1.OffsetCommitPartition{{Topic: "extra", Partition: 0, Offset: 1}}})
	if err == nil && resp.GetPartitions()[0].GetError() == cohortv1.ErrorCode_ERROR_CODE_NONE {
		t.Fatalf("a commit past the offsets budget was accepted")
	}

	var got []*cohortv1.OffsetFetchPartition
	req := &cohortv1.OffsetFetchRequest{GroupId: "full"}
	pages := 0
	for {
		// Raw calls to the leader, with gRPC's default receive limit.
		var page *cohortv1.OffsetFetchResponse
		testcluster.WaitFor(t, 20*time.Second, fmt.Sprintf("OffsetFetch page %d", pages+1), func() (bool, string) {
			leader := c.Leader()
			if leader < 0 {
				return false, "no leader"
			}
			var err error
			page, err = c.Groups(leader).OffsetFetch(ctx, req)
			if status.Code(err) == codes.Unavailable {
				return false, err.Error()
			}
			if err != nil {
				t.Fatalf("OffsetFetch page %d: %v", pages+1, err)
			}
			return true, ""
		})
		if size := proto.Size(page); size > 4<<20 {
			t.Fatalf("page %d is %d bytes, over 4 MiB", pages+1, size)
		}
		got = append(got, page.GetPartitions()...)
		pages++
		if page.GetNextPageToken() == "" {
			break
		}
		req.PageToken = page.GetNextPageToken()
		if pages == 2 {
			// The token is a position in the state: the next leader resumes it.
			c.Kill(c.Leader())
			c.WaitServing()
		}
	}
	if pages < 5 {
		t.Fatalf("%d pages; 18 MB of offsets should take at least 5", pages)
	}
	if len(got) != topics*partitions {
		t.Fatalf("fetched %d offsets, want %d", len(got), topics*partitions)
	}
	for i, p := range got {
		want := fmt.Sprintf("t%d/%d=%d", i/partitions, i%partitions, i/partitions)
		if have := fmt.Sprintf("%s/%d=%d", p.GetTopic(), p.GetPartition(), p.GetOffset()); have != want || p.GetMetadata() != metadata {
			t.Fatalf("offset %d is %s, want %s (in order, each once)", i, have, want)
		}
	}

	// The client helper follows the pages too.
	all, err := client.FetchOffsets(ctx, conn.Groups(), &cohortv1.OffsetFetchRequest{GroupId: "full"})
	if err != nil || len(all) != topics*partitions {
		t.Fatalf("client.FetchOffsets: %d offsets, %v", len(all), err)
	}
}

// A page may end in the middle of a topic: the next page starts at the
// following partition of the same topic. Asked-for partitions page the
// same way, each once, in order.
func TestOffsetFetch_PageBoundaryInsideATopic(t *testing.T) {
	c := cluster(t)
	ctx := testCtx(t)
	createTopic(t, c, "a", 5)
	createTopic(t, c, "b", 2)
	g := c.Groups(c.Leader())
	standaloneCommit(t, g, "g", "a", 5, 10, "")
	standaloneCommit(t, g, "g", "b", 2, 20, "")

	keys := func(ps []*cohortv1.OffsetFetchPartition) []string {
		var out []string
		for _, p := range ps {
			out = append(out, fmt.Sprintf("%s/%d", p.GetTopic(), p.GetPartition()))
		}
		return out
	}
	first, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g", PageSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(first.GetPartitions()); !slices.Equal(got, []string{"a/0", "a/1", "a/2"}) || first.GetNextPageToken() == "" {
		t.Fatalf("first page %v (token %q), want a/0..a/2 and a token", got, first.GetNextPageToken())
	}
	second, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g", PageSize: 3, PageToken: first.GetNextPageToken()})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(second.GetPartitions()); !slices.Equal(got, []string{"a/3", "a/4", "b/0"}) || second.GetNextPageToken() == "" {
		t.Fatalf("second page %v, want a/3, a/4, b/0 and a token", got)
	}
	third, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "g", PageSize: 3, PageToken: second.GetNextPageToken()})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(third.GetPartitions()); !slices.Equal(got, []string{"b/1"}) || third.GetNextPageToken() != "" {
		t.Fatalf("last page %v (token %q), want b/1 and no token", got, third.GetNextPageToken())
	}

	// Asked-for partitions: in the order asked, duplicates once, missing ones -1.
	asked := &cohortv1.OffsetFetchRequest{GroupId: "g", PageSize: 2, Partitions: []*cohortv1.TopicPartitions{
		{Topic: "b", Partitions: []int32{1, 7}}, {Topic: "a", Partitions: []int32{4, 4, 0}},
	}}
	all, err := client.FetchOffsets(ctx, g, asked)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(all); !slices.Equal(got, []string{"b/1", "b/7", "a/4", "a/0"}) || all[1].GetOffset() != -1 {
		t.Fatalf("asked-for partitions %v (b/7 offset %d), want b/1 b/7 a/4 a/0 with b/7 at -1", got, all[1].GetOffset())
	}
}

// Every paged read pages, in its order, and refuses a token it did not
// issue or a negative page size with InvalidArgument naming the field.
func TestPagedReads_OrderTokensAndBadInput(t *testing.T) {
	c := cluster(t) // topic t
	ctx := testCtx(t)
	for _, name := range []string{"d", "b", "c", "a"} {
		createTopic(t, c, name, 1)
		standaloneCommit(t, c.Groups(c.Leader()), "group-"+name, name, 1, 1, "")
	}
	g, tp := c.Groups(c.Leader()), c.Topics(c.Leader())

	topics, err := client.ListTopics(ctx, tp, &cohortv1.ListTopicsRequest{PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range topics {
		names = append(names, x.GetTopic())
	}
	if !slices.Equal(names, []string{"a", "b", "c", "d", "t"}) {
		t.Fatalf("ListTopics pages %v, want a b c d t", names)
	}
	groups, err := client.ListGroups(ctx, g, &cohortv1.ListGroupsRequest{PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, x := range groups {
		ids = append(ids, x.GetGroupId())
	}
	if !slices.Equal(ids, []string{"group-a", "group-b", "group-c", "group-d"}) {
		t.Fatalf("ListGroups pages %v", ids)
	}
	described, err := client.DescribeGroups(ctx, g, &cohortv1.DescribeGroupsRequest{PageSize: 2, GroupIds: []string{"group-d", "nope", "group-a", "group-d"}})
	if err != nil {
		t.Fatal(err)
	}
	ids = ids[:0]
	for _, x := range described {
		ids = append(ids, x.GetGroupId()+":"+x.GetState())
	}
	if !slices.Equal(ids, []string{"group-d:Empty", "nope:Dead", "group-a:Empty"}) {
		t.Fatalf("DescribeGroups pages %v", ids)
	}

	first, err := g.ListGroups(ctx, &cohortv1.ListGroupsRequest{PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"garbage token": func() error {
			_, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "group-a", PageToken: "not a token"})
			return err
		},
		"another read's token": func() error {
			_, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "group-a", PageToken: first.GetNextPageToken()})
			return err
		},
		"truncated offsets token": func() error {
			_, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "group-a", PageToken: "AW8"}) // version 1, kind 'o', no key
			return err
		},
		"token of a partition not asked for": func() error {
			page, err := g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "group-a", PageSize: 1,
				Partitions: []*cohortv1.TopicPartitions{{Topic: "a", Partitions: []int32{0, 1}}}})
			if err != nil {
				return err
			}
			_, err = g.OffsetFetch(ctx, &cohortv1.OffsetFetchRequest{GroupId: "group-a", PageToken: page.GetNextPageToken(),
				Partitions: []*cohortv1.TopicPartitions{{Topic: "b", Partitions: []int32{0}}}})
			return err
		},
		"negative page size": func() error {
			_, err := tp.ListTopics(ctx, &cohortv1.ListTopicsRequest{PageSize: -1})
			return err
		},
	} {
		err := call()
		if status.Code(err) != codes.InvalidArgument || !(strings.Contains(err.Error(), "page_token") || strings.Contains(err.Error(), "page_size -1")) {
			t.Errorf("%s: %v, want InvalidArgument naming the field", name, err)
		}
	}
}
