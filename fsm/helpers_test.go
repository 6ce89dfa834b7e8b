package fsm

import (
	"bytes"
	"cmp"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// Command builders shared by the tests.

func at(ts int64, c isKind) *fsmv1.Command {
	cmd := &fsmv1.Command{TimestampMs: ts}
	c.set(cmd)
	return cmd
}

type isKind interface{ set(*fsmv1.Command) }

type join struct {
	group, member, instance string
	topics                  []string
	protocols               []string
	newMember               bool
	delayMs                 int32
	sessionMs, rebalanceMs  int32
	protocolType            string
	metadata                string
}

func (j join) set(c *fsmv1.Command) {
	protos := j.protocols
	if protos == nil {
		protos = []string{"range"}
	}
	spec := &fsmv1.MemberSpec{
		MemberId: j.member, InstanceId: j.instance, ClientId: "client-" + j.member, ClientHost: "127.0.0.1",
		SessionTimeoutMs: orDefault(j.sessionMs, 10000), RebalanceTimeoutMs: orDefault(j.rebalanceMs, 30000),
		Topics: j.topics,
	}
	for _, p := range protos {
		spec.Protocols = append(spec.Protocols, &fsmv1.Protocol{Name: p, Metadata: []byte(j.metadata)})
	}
	pt := j.protocolType
	if pt == "" {
		pt = "consumer"
	}
	c.Kind = &fsmv1.Command_JoinMember{JoinMember: &fsmv1.JoinMember{
		GroupId: j.group, ProtocolType: pt, Member: spec, NewMember: j.newMember, InitialRebalanceDelayMs: j.delayMs,
	}}
}

func orDefault(v, d int32) int32 {
	if v == 0 {
		return d
	}
	return v
}

type completeJoin struct {
	group        string
	generation   int32
	initialDelay bool
}

func (cj completeJoin) set(c *fsmv1.Command) {
	c.Kind = &fsmv1.Command_CompleteJoin{CompleteJoin: &fsmv1.CompleteJoin{GroupId: cj.group, Generation: cj.generation, InitialDelay: cj.initialDelay}}
}

// plan maps member → "topic" → partitions.
type plan map[string]map[string][]int32

type syncCmd struct {
	group      string
	generation int32
	member     string
	plan       plan
}

func (sc syncCmd) set(c *fsmv1.Command) {
	s := &fsmv1.SyncAssignment{GroupId: sc.group, Generation: sc.generation, MemberId: sc.member}
	for _, m := range sortedKeysOf(sc.plan) {
		a := &fsmv1.Assignment{}
		for _, t := range sortedKeysOf(sc.plan[m]) {
			a.Topics = append(a.Topics, &fsmv1.TopicPartitions{Topic: t, Partitions: sc.plan[m][t]})
		}
		s.Assignments = append(s.Assignments, &fsmv1.MemberAssignment{MemberId: m, Assignment: a})
	}
	c.Kind = &fsmv1.Command_SyncAssignment{SyncAssignment: s}
}

type remove struct {
	group   string
	members []string
	reason  fsmv1.RemoveReason
}

func (r remove) set(c *fsmv1.Command) {
	rm := &fsmv1.RemoveMembers{GroupId: r.group, Reason: r.reason}
	for _, m := range r.members {
		rm.Members = append(rm.Members, &fsmv1.MemberRef{MemberId: m})
	}
	c.Kind = &fsmv1.Command_RemoveMembers{RemoveMembers: rm}
}

type commit struct {
	group      string
	generation int32
	member     string
	instance   string
	topic      string
	partitions []int32
	offset     int64
}

func (cm commit) set(c *fsmv1.Command) {
	co := &fsmv1.CommitOffsets{GroupId: cm.group, Generation: cm.generation, MemberId: cm.member, InstanceId: cm.instance}
	for _, p := range cm.partitions {
		co.Offsets = append(co.Offsets, &fsmv1.OffsetCommit{Topic: cm.topic, Partition: p, Offset: cm.offset, Metadata: "m"})
	}
	c.Kind = &fsmv1.Command_CommitOffsets{CommitOffsets: co}
}

type createTopic struct {
	name       string
	partitions int32
}

func (ct createTopic) set(c *fsmv1.Command) {
	c.Kind = &fsmv1.Command_CreateTopic{CreateTopic: &fsmv1.CreateTopic{Name: ct.name, Partitions: ct.partitions}}
}

type deleteTopic string

func (d deleteTopic) set(c *fsmv1.Command) {
	c.Kind = &fsmv1.Command_DeleteTopic{DeleteTopic: &fsmv1.DeleteTopic{Name: string(d)}}
}

type addPartitions struct {
	name       string
	partitions int32
}

func (a addPartitions) set(c *fsmv1.Command) {
	c.Kind = &fsmv1.Command_AddPartitions{AddPartitions: &fsmv1.AddPartitions{Name: a.name, Partitions: a.partitions}}
}

type deleteGroups []string

func (d deleteGroups) set(c *fsmv1.Command) {
	c.Kind = &fsmv1.Command_DeleteGroups{DeleteGroups: &fsmv1.DeleteGroups{GroupIds: d}}
}

type expire int64

func (e expire) set(c *fsmv1.Command) {
	c.Kind = &fsmv1.Command_ExpireOffsets{ExpireOffsets: &fsmv1.ExpireOffsets{RetentionMs: int64(e)}}
}

type registerNode struct{ id, grpc, raft string }

func (r registerNode) set(c *fsmv1.Command) {
	c.Kind = &fsmv1.Command_RegisterNode{RegisterNode: &fsmv1.RegisterNode{NodeId: r.id, GrpcAddress: r.grpc, RaftAddress: r.raft}}
}

func sortedKeysOf[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// harness applies commands to an FSM with increasing indexes.
type harness struct {
	t     testing.TB
	f     *FSM
	index uint64
}

func newHarness(t testing.TB) *harness { return &harness{t: t, f: New()} }

func (h *harness) apply(cmd *fsmv1.Command) *ApplyResult {
	h.t.Helper()
	h.index++
	data, err := EncodeCommand(cmd)
	if err != nil {
		h.t.Fatalf("encode: %v", err)
	}
	return h.f.ApplyEntry(h.index, data)
}

// ok applies a command that must succeed as a whole.
func (h *harness) ok(cmd *fsmv1.Command) *ApplyResult {
	h.t.Helper()
	res := h.apply(cmd)
	if res.Err != nil {
		h.t.Fatalf("apply %v: unexpected error %v", cmd, res.Err)
	}
	return res
}

// refused applies a command that must be refused with code, and checks the
// state did not change.
func (h *harness) refused(cmd *fsmv1.Command, code errcode.Code) *ApplyResult {
	h.t.Helper()
	before := snapshotBytes(h.t, h.f)
	res := h.apply(cmd)
	if errcode.Of(res.Err) != code {
		h.t.Fatalf("apply %v: got error %v, want %s", cmd, res.Err, code)
	}
	if after := snapshotBytes(h.t, h.f); !bytes.Equal(before, after) {
		h.t.Fatalf("refused command %v changed the state", cmd)
	}
	return res
}

func (h *harness) group(id string) *Group {
	h.t.Helper()
	g, ok := h.f.Group(id)
	if !ok {
		h.t.Fatalf("group %q does not exist", id)
	}
	return g
}

func snapshotBytes(t testing.TB, f *FSM) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := f.Snapshot().WriteTo(&buf); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return buf.Bytes()
}

func wantCode(t testing.TB, err error, code errcode.Code) {
	t.Helper()
	if errcode.Of(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	if code != errcode.None {
		var pe *errcode.ProtocolError
		if !errors.As(err, &pe) || pe.Msg == "" {
			t.Fatalf("error %v has no message saying what is wrong", err)
		}
	}
}

type deleteOffsets struct {
	group      string
	topic      string
	partitions []int32
}

func (d deleteOffsets) set(c *fsmv1.Command) {
	do := &fsmv1.DeleteOffsets{GroupId: d.group}
	for _, p := range d.partitions {
		do.Partitions = append(do.Partitions, &fsmv1.PartitionKey{Topic: d.topic, Partition: p})
	}
	c.Kind = &fsmv1.Command_DeleteOffsets{DeleteOffsets: do}
}

// hb is a ConsumerHeartbeat. topics nil: unchanged (except on a join,
// which always states them); owned nil: not stated.
type hb struct {
	group, member string
	epoch         int32
	topics        []string
	owned         map[string][]int32
	assignor      string
	instance      string
	regex         *string // nil: not stated
	rules         uint32  // 0: CommandVersion
}

func (h hb) set(c *fsmv1.Command) {
	ch := &fsmv1.ConsumerHeartbeat{GroupId: h.group, MemberId: h.member, MemberEpoch: h.epoch, RebalanceTimeoutMs: -1,
		ServerAssignor: h.assignor, InstanceId: h.instance, ClientId: "c-" + h.member}
	if h.epoch == 0 {
		ch.RebalanceTimeoutMs = 30_000
	}
	if h.topics != nil || h.epoch == 0 {
		ch.HasTopics, ch.SubscribedTopics = true, h.topics
	}
	if h.owned != nil {
		ch.HasOwned = true
		for _, t := range sortedKeysOf(h.owned) {
			ch.Owned = append(ch.Owned, &fsmv1.TopicPartitions{Topic: t, Partitions: h.owned[t]})
		}
	}
	if h.regex != nil {
		ch.HasRegex, ch.SubscribedTopicRegex = true, *h.regex
		if h.topics == nil {
			ch.HasTopics = false
		}
	}
	c.Version = cmp.Or(h.rules, CommandVersion)
	c.Kind = &fsmv1.Command_ConsumerHeartbeat{ConsumerHeartbeat: ch}
}

// memberListOf returns a list of the given members, which must be sorted by
// ID.
func memberListOf(ms ...*Member) MemberList {
	var l MemberList
	for _, m := range ms {
		l.appendSorted(m, 0)
	}
	return l
}
