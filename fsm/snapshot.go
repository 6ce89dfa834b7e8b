package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"slices"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
	"github.com/cohortlabs/cohort/offsets"
	"google.golang.org/protobuf/proto"
)

// SnapshotFormatVersion is written in every snapshot header. Restore refuses
// any other version.
const SnapshotFormatVersion = 1

// snapshotMagic opens every snapshot so that a foreign file is refused at once.
var snapshotMagic = []byte("COHORTSN")

// maxRecordBytes bounds one record, so a corrupted length cannot make
// Restore allocate without limit.
const maxRecordBytes = 256 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is a point-in-time copy of the state, sharing unchanged data with
// the live state. It is written out with WriteTo while Apply goes on.
type Snapshot struct {
	state *State
	index uint64
}

// Index is the last applied log index the snapshot contains.
func (s *Snapshot) Index() uint64 { return s.index }

// WriteTo writes the snapshot: magic, header, length-delimited records
// (nodes, topics, groups, offsets, each sorted by key), an empty record, and
// a trailer with counts and a CRC-32C of everything before it.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: bufio.NewWriterSize(w, 1<<16), crc: crc32.New(castagnoli)}
	enc := recordEncoder{w: cw}
	cw.Write(snapshotMagic)
	st := s.state
	enc.put(&fsmv1.SnapshotHeader{FormatVersion: SnapshotFormatVersion, Rules: st.rulesSeen})
	var tr fsmv1.SnapshotTrailer
	if st.budgets != (Budgets{}) {
		enc.put(&fsmv1.SnapshotRecord{Kind: &fsmv1.SnapshotRecord_Budgets{Budgets: st.budgets.Proto()}})
	}
	for _, n := range st.sortedNodes() {
		enc.put(&fsmv1.SnapshotRecord{Kind: &fsmv1.SnapshotRecord_Node{Node: &fsmv1.Node{NodeId: n.ID, GrpcAddress: n.GRPCAddress, RaftAddress: n.RaftAddress, MaxCommandVersion: n.MaxCommandVersion, KafkaAddress: n.KafkaAddress}}})
		tr.Nodes++
	}
	for _, name := range slices.Sorted(maps.Keys(st.topics)) {
		enc.put(&fsmv1.SnapshotRecord{Kind: &fsmv1.SnapshotRecord_Topic{Topic: &fsmv1.Topic{Name: name, Partitions: st.topics[name]}}})
		tr.Topics++
	}
	for _, g := range st.Groups() {
		enc.put(&fsmv1.SnapshotRecord{Kind: &fsmv1.SnapshotRecord_Group{Group: groupToProto(g)}})
		tr.Groups++
	}
	for _, g := range st.ConsumerGroups() {
		enc.put(&fsmv1.SnapshotRecord{Kind: &fsmv1.SnapshotRecord_ConsumerGroup{ConsumerGroup: consumerGroupToProto(g)}})
		tr.Groups++
	}
	rec := &fsmv1.OffsetRecord{}
	wrapped := &fsmv1.SnapshotRecord{Kind: &fsmv1.SnapshotRecord_Offset{Offset: rec}}
	st.offsets.Range(func(e offsets.Entry) bool {
		*rec = fsmv1.OffsetRecord{
			GroupId: e.Group, Topic: e.Key.Topic, Partition: e.Key.Partition,
			Offset: e.Value.Offset, Metadata: e.Value.Metadata,
			CommitTimestampMs: e.Value.CommitTimestampMs, Generation: e.Value.Generation,
		}
		enc.put(wrapped)
		tr.Offsets++
		return enc.err == nil
	})
	enc.putRaw(nil) // end of records
	tr.Crc32C = cw.crc.Sum32()
	enc.put(&tr)
	if enc.err == nil {
		enc.err = cw.w.Flush()
	}
	return cw.n, enc.err
}

// ReadSnapshot decodes a snapshot written by WriteTo into a new State. Any
// fault (foreign file, other format version, truncation, bad CRC, invalid
// record) is an error naming what is wrong.
func ReadSnapshot(r io.Reader) (*State, error) {
	crc := crc32.New(castagnoli)
	br := bufio.NewReaderSize(r, 1<<16)
	dec := recordDecoder{r: br, crc: crc}
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != string(snapshotMagic) {
		return nil, fmt.Errorf("restore snapshot: not a Cohort snapshot (bad magic %q)", magic)
	}
	crc.Write(magic)
	var hdr fsmv1.SnapshotHeader
	if err := dec.next(&hdr); err != nil {
		return nil, fmt.Errorf("restore snapshot: header: %w", err)
	}
	if hdr.GetFormatVersion() != SnapshotFormatVersion {
		return nil, fmt.Errorf("restore snapshot: format version %d, this build reads version %d", hdr.GetFormatVersion(), SnapshotFormatVersion)
	}
	st := NewState()
	st.rulesSeen = hdr.GetRules()
	var counts fsmv1.SnapshotTrailer
	var rec fsmv1.SnapshotRecord
	for i := 0; ; i++ {
		end, err := dec.nextOrEnd(&rec)
		if err != nil {
			return nil, fmt.Errorf("restore snapshot: record %d: %w", i, err)
		}
		if end {
			break
		}
		if err := st.restoreRecord(&rec, &counts); err != nil {
			return nil, fmt.Errorf("restore snapshot: record %d: %w", i, err)
		}
	}
	want := crc.Sum32()
	var tr fsmv1.SnapshotTrailer
	dec.crc = nil
	if err := dec.next(&tr); err != nil {
		return nil, fmt.Errorf("restore snapshot: trailer: %w", err)
	}
	if tr.GetCrc32C() != want {
		return nil, fmt.Errorf("restore snapshot: checksum mismatch (trailer says %08x, content is %08x): the file is corrupted", tr.GetCrc32C(), want)
	}
	if tr.GetNodes() != counts.Nodes || tr.GetTopics() != counts.Topics || tr.GetGroups() != counts.Groups || tr.GetOffsets() != counts.Offsets {
		return nil, fmt.Errorf("restore snapshot: trailer counts (%d nodes, %d topics, %d groups, %d offsets) differ from the records read (%d, %d, %d, %d)",
			tr.GetNodes(), tr.GetTopics(), tr.GetGroups(), tr.GetOffsets(), counts.Nodes, counts.Topics, counts.Groups, counts.Offsets)
	}
	st.measureAll()
	return st, nil
}

func (s *State) restoreRecord(rec *fsmv1.SnapshotRecord, counts *fsmv1.SnapshotTrailer) error {
	switch k := rec.GetKind().(type) {
	case *fsmv1.SnapshotRecord_Node:
		n := k.Node
		if n.GetNodeId() == "" {
			return errors.New("node record without node_id")
		}
		s.nodes[n.GetNodeId()] = Node{ID: n.GetNodeId(), GRPCAddress: n.GetGrpcAddress(), RaftAddress: n.GetRaftAddress(), MaxCommandVersion: n.GetMaxCommandVersion(), KafkaAddress: n.GetKafkaAddress()}
		counts.Nodes++
	case *fsmv1.SnapshotRecord_Topic:
		t := k.Topic
		if t.GetName() == "" || t.GetPartitions() <= 0 {
			return fmt.Errorf("invalid topic record %q with %d partitions", t.GetName(), t.GetPartitions())
		}
		s.topics[t.GetName()] = t.GetPartitions()
		counts.Topics++
	case *fsmv1.SnapshotRecord_Group:
		g, err := groupFromProto(k.Group)
		if err != nil {
			return err
		}
		g.epoch = s.epoch
		s.groups[g.ID] = g
		s.members += g.Members.Len()
		counts.Groups++
	case *fsmv1.SnapshotRecord_ConsumerGroup:
		g, err := consumerGroupFromProto(k.ConsumerGroup)
		if err != nil {
			return err
		}
		if _, dup := s.groups[g.ID]; dup {
			return fmt.Errorf("consumer group %q is also a classic group", g.ID)
		}
		s.putConsumerGroup(g.ID, g)
		counts.Groups++
	case *fsmv1.SnapshotRecord_Budgets:
		s.budgets = budgetsFromProto(k.Budgets)
	case *fsmv1.SnapshotRecord_Offset:
		o := k.Offset
		if o.GetGroupId() == "" || o.GetTopic() == "" {
			return fmt.Errorf("offset record without group or topic (%q, %q)", o.GetGroupId(), o.GetTopic())
		}
		s.offsets.Put(o.GetGroupId(), offsets.Key{Topic: o.GetTopic(), Partition: o.GetPartition()}, offsets.Value{
			Offset: o.GetOffset(), Metadata: o.GetMetadata(),
			CommitTimestampMs: o.GetCommitTimestampMs(), Generation: o.GetGeneration(),
		})
		counts.Offsets++
	default:
		return fmt.Errorf("unknown record kind %T", k)
	}
	return nil
}

func consumerGroupToProto(g *ConsumerGroup) *fsmv1.ConsumerGroup {
	pg := &fsmv1.ConsumerGroup{GroupId: g.ID, Epoch: g.Epoch, AssignmentEpoch: g.AssignmentEpoch, Assignor: g.Assignor, StateChangedMs: g.StateChangedMs}
	for _, m := range g.Members.All() {
		pg.Members = append(pg.Members, &fsmv1.ConsumerMember{
			MemberId: m.ID, InstanceId: m.InstanceID, RackId: m.RackID, ClientId: m.ClientID, ClientHost: m.ClientHost,
			RebalanceTimeoutMs: m.RebalanceTimeoutMs, Topics: m.Topics, Assignor: m.Assignor, Epoch: m.Epoch, PreviousEpoch: m.PreviousEpoch,
			Assigned: AssignmentToProto(m.Assigned), Revoking: AssignmentToProto(m.Revoking), Target: AssignmentToProto(m.Target),
			TopicRegex: m.Regex, AdvancedFrom: m.AdvancedFrom,
		})
	}
	return pg
}

func consumerGroupFromProto(pg *fsmv1.ConsumerGroup) (*ConsumerGroup, error) {
	if pg.GetGroupId() == "" {
		return nil, errors.New("consumer group record without group_id")
	}
	g := &ConsumerGroup{ID: pg.GetGroupId(), Epoch: pg.GetEpoch(), AssignmentEpoch: pg.GetAssignmentEpoch(), Assignor: pg.GetAssignor(), StateChangedMs: pg.GetStateChangedMs()}
	for _, pm := range pg.GetMembers() {
		if pm.GetMemberId() == "" {
			return nil, fmt.Errorf("consumer group %q: a member record without member_id", g.ID)
		}
		if last, ok := g.Members.last(); ok && last.ID >= pm.GetMemberId() {
			return nil, fmt.Errorf("consumer group %q: members not sorted by ID (%q after %q)", g.ID, pm.GetMemberId(), last.ID)
		}
		re, perr := CompileTopicRegex(pm.GetTopicRegex())
		if perr != nil {
			return nil, fmt.Errorf("consumer group %q, member %q: %w", g.ID, pm.GetMemberId(), perr)
		}
		g.Members.appendSorted(&ConsumerMember{
			ID: pm.GetMemberId(), InstanceID: pm.GetInstanceId(), RackID: pm.GetRackId(), ClientID: pm.GetClientId(), ClientHost: pm.GetClientHost(),
			RebalanceTimeoutMs: pm.GetRebalanceTimeoutMs(), Topics: pm.GetTopics(), Assignor: pm.GetAssignor(), Epoch: pm.GetEpoch(), PreviousEpoch: pm.GetPreviousEpoch(),
			Assigned: assignmentFromProto(pm.GetAssigned()), Revoking: assignmentFromProto(pm.GetRevoking()), Target: assignmentFromProto(pm.GetTarget()),
			Regex: pm.GetTopicRegex(), re: re, AdvancedFrom: pm.GetAdvancedFrom(),
		}, 0)
	}
	return g, nil
}

func groupToProto(g *Group) *fsmv1.Group {
	pg := &fsmv1.Group{
		GroupId: g.ID, ProtocolType: g.ProtocolType, Protocol: g.Protocol,
		Generation: g.Generation, LeaderId: g.LeaderID, State: fsmv1.GroupState(g.State),
		RebalanceStartedMs: g.RebalanceStartedMs, InitialDelayUntilMs: g.InitialDelayUntilMs,
		StateChangedMs: g.StateChangedMs, NextJoinSeq: g.NextJoinSeq,
	}
	for _, m := range g.Members.All() {
		pm := &fsmv1.Member{
			Spec: &fsmv1.MemberSpec{
				MemberId: m.ID, InstanceId: m.InstanceID, ClientId: m.ClientID, ClientHost: m.ClientHost,
				SessionTimeoutMs: m.SessionTimeoutMs, RebalanceTimeoutMs: m.RebalanceTimeoutMs, Topics: m.Topics,
			},
			Joined: m.Joined, JoinSeq: m.JoinSeq, JoinedAtMs: m.JoinedAtMs,
			Assignment: AssignmentToProto(m.Assignment),
		}
		if len(m.PreviousAssignment.Topics) > 0 || len(m.PreviousAssignment.UserData) > 0 {
			pm.PreviousAssignment = AssignmentToProto(m.PreviousAssignment)
		}
		for _, p := range m.Protocols {
			pm.Spec.Protocols = append(pm.Spec.Protocols, &fsmv1.Protocol{Name: p.Name, Metadata: p.Metadata})
		}
		pg.Members = append(pg.Members, pm)
	}
	return pg
}

// AssignmentToProto converts an assignment to its wire form.
func AssignmentToProto(a Assignment) *fsmv1.Assignment {
	pa := &fsmv1.Assignment{UserData: a.UserData}
	for _, tp := range a.Topics {
		pa.Topics = append(pa.Topics, &fsmv1.TopicPartitions{Topic: tp.Topic, Partitions: tp.Partitions})
	}
	return pa
}

func assignmentFromProto(a *fsmv1.Assignment) Assignment {
	out := Assignment{UserData: a.GetUserData()}
	for _, tp := range a.GetTopics() {
		out.Topics = append(out.Topics, TopicPartitions{Topic: tp.GetTopic(), Partitions: tp.GetPartitions()})
	}
	return out
}

func groupFromProto(pg *fsmv1.Group) (*Group, error) {
	if pg.GetGroupId() == "" {
		return nil, errors.New("group record without group_id")
	}
	st := GroupState(pg.GetState())
	if st < Empty || st >= Dead {
		return nil, fmt.Errorf("group %q has invalid state %d", pg.GetGroupId(), pg.GetState())
	}
	g := &Group{
		ID: pg.GetGroupId(), ProtocolType: pg.GetProtocolType(), Protocol: pg.GetProtocol(),
		Generation: pg.GetGeneration(), LeaderID: pg.GetLeaderId(), State: st,
		RebalanceStartedMs: pg.GetRebalanceStartedMs(), InitialDelayUntilMs: pg.GetInitialDelayUntilMs(),
		StateChangedMs: pg.GetStateChangedMs(), NextJoinSeq: pg.GetNextJoinSeq(),
	}
	for _, pm := range pg.GetMembers() {
		m, perr := memberFromSpec(pm.GetSpec())
		if perr != nil {
			return nil, fmt.Errorf("group %q: %w", g.ID, perr)
		}
		m.Joined, m.JoinSeq, m.JoinedAtMs = pm.GetJoined(), pm.GetJoinSeq(), pm.GetJoinedAtMs()
		m.Assignment = assignmentFromProto(pm.GetAssignment())
		m.PreviousAssignment = assignmentFromProto(pm.GetPreviousAssignment())
		if last, ok := g.Members.last(); ok && last.ID >= m.ID {
			return nil, fmt.Errorf("group %q: members not sorted at %q", g.ID, m.ID)
		}
		g.Members.appendSorted(m, 0)
	}
	// The FSM gives an instance ID to one member at a time (a second is
	// fenced, or replaces the first); the index of static members
	// (MemberByInstance) holds one member per instance.
	static := map[string]string{}
	for _, m := range g.Members.All() {
		if m.InstanceID == "" {
			continue
		}
		if other, dup := static[m.InstanceID]; dup {
			return nil, fmt.Errorf("group %q: members %q and %q have the same instance_id %q", g.ID, other, m.ID, m.InstanceID)
		}
		static[m.InstanceID] = m.ID
	}
	return g, nil
}

type countingWriter struct {
	w   *bufio.Writer
	crc hash.Hash32
	n   int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if c.crc != nil {
		c.crc.Write(p[:n])
	}
	return n, err
}

type recordEncoder struct {
	w   io.Writer
	buf []byte
	err error
}

var deterministic = proto.MarshalOptions{Deterministic: true}

func (e *recordEncoder) put(m proto.Message) {
	if e.err != nil {
		return
	}
	b, err := deterministic.MarshalAppend(e.buf[:0], m)
	if err != nil {
		e.err = fmt.Errorf("encode snapshot record: %w", err)
		return
	}
	e.buf = b
	if b == nil {
		b = []byte{} // an empty message is a record of length 0, not the end marker
	}
	e.putRaw(b)
}

// putRaw writes one record as (uvarint length+1, bytes); length 0 marks the end.
func (e *recordEncoder) putRaw(b []byte) {
	if e.err != nil {
		return
	}
	var hdr [binary.MaxVarintLen64]byte
	var n int
	if b == nil {
		n = binary.PutUvarint(hdr[:], 0)
	} else {
		n = binary.PutUvarint(hdr[:], uint64(len(b))+1)
	}
	if _, err := e.w.Write(hdr[:n]); err != nil {
		e.err = fmt.Errorf("write snapshot: %w", err)
		return
	}
	if _, err := e.w.Write(b); err != nil {
		e.err = fmt.Errorf("write snapshot: %w", err)
	}
}

type recordDecoder struct {
	r   *bufio.Reader
	crc hash.Hash32
	buf []byte
}

func (d *recordDecoder) readByte() (byte, error) {
	b, err := d.r.ReadByte()
	if err == nil && d.crc != nil {
		d.crc.Write([]byte{b})
	}
	return b, err
}

func (d *recordDecoder) nextOrEnd(m proto.Message) (end bool, err error) {
	l, err := binary.ReadUvarint(byteReader{d})
	if err != nil {
		return false, fmt.Errorf("truncated snapshot: %w", noEOF(err))
	}
	if l == 0 {
		return true, nil
	}
	l--
	if l > maxRecordBytes {
		return false, fmt.Errorf("record length %d exceeds the limit of %d bytes", l, maxRecordBytes)
	}
	if cap(d.buf) < int(l) {
		d.buf = make([]byte, l)
	}
	d.buf = d.buf[:l]
	if _, err := io.ReadFull(d.r, d.buf); err != nil {
		return false, fmt.Errorf("truncated snapshot: %w", noEOF(err))
	}
	if d.crc != nil {
		d.crc.Write(d.buf)
	}
	if err := proto.Unmarshal(d.buf, m); err != nil {
		return false, fmt.Errorf("decode: %w", err)
	}
	return false, nil
}

func (d *recordDecoder) next(m proto.Message) error {
	end, err := d.nextOrEnd(m)
	if err == nil && end {
		err = errors.New("unexpected end of records")
	}
	return err
}

type byteReader struct{ d *recordDecoder }

func (b byteReader) ReadByte() (byte, error) { return b.d.readByte() }

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
