package assign

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The wire formats of subscription metadata (what a member puts in its
// JoinGroup protocol metadata) and of an assignment (what SyncGroup hands
// each member). Version 1, all integers unsigned LEB128 varints unless
// said otherwise:
//
//	Subscription:  version (uint16, big-endian)
//	               topics       count, then each: string
//	               owned        count, then each: string topic, count, partitions
//	               generation   zig-zag varint, within int32
//	               user data    length, then bytes
//	Assignment:    version (uint16, big-endian)
//	               topics       count, then each: string topic, count, partitions
//	               user data    length, then bytes
//	string:        length (1..MaxNameLength), then bytes
//
// The form is canonical: topics strictly increasing (byte order),
// partitions strictly increasing and ≤ math.MaxInt32, varints minimal, no
// empty partition lists, nothing after the last field. So a decoder accepts
// exactly what the encoder produces, and Encode(Decode(b)) == b. A version
// above 1 is read as version 1 followed by fields this decoder does not
// know, which it skips (so an old coordinator can read a newer client);
// version 0 is refused.

// Versions of the encodings this package writes.
const (
	SubscriptionVersion uint16 = 1
	AssignmentVersion   uint16 = 1
	// MaxNameLength bounds topic names in the encodings, as the FSM does.
	MaxNameLength = 1024
)

// ErrMalformed wraps every decoding error; the message says which field is
// wrong, at which byte offset, and why.
var ErrMalformed = errors.New("assign: malformed encoding")

// Subscription is a member's protocol metadata.
type Subscription struct {
	// Topics the member subscribes to.
	Topics []string
	// Owned is what the member owned in generation Generation.
	Owned []TopicPartitions
	// Generation of Owned, NoGeneration if none.
	Generation int32
	// UserData is opaque to the assignors.
	UserData []byte
}

// Assignment is one member's share of a plan, as sent to it.
type Assignment struct {
	Topics   []TopicPartitions
	UserData []byte
}

// EncodeSubscription returns the canonical version-1 encoding of s. Topics
// and partitions may come in any order and repeat; they are written sorted
// and unique. It fails on an empty or too long topic name or a negative
// partition.
func EncodeSubscription(s Subscription) ([]byte, error) {
	topics := slices.Clone(s.Topics)
	slices.Sort(topics)
	topics = slices.Compact(topics)
	owned := canonicalTopicPartitions(s.Owned)
	size := 2 + 3*binary.MaxVarintLen64 + len(s.UserData)
	for _, t := range topics {
		size += binary.MaxVarintLen32 + len(t)
	}
	size += tpSize(owned)
	b := make([]byte, 0, size)
	b = binary.BigEndian.AppendUint16(b, SubscriptionVersion)
	b = binary.AppendUvarint(b, uint64(len(topics)))
	for _, t := range topics {
		if err := checkTopicName(t); err != nil {
			return nil, fmt.Errorf("encode subscription: %w", err)
		}
		b = appendString(b, t)
	}
	b, err := appendTopicPartitions(b, owned)
	if err != nil {
		return nil, fmt.Errorf("encode subscription: owned: %w", err)
	}
	b = binary.AppendVarint(b, int64(s.Generation))
	b = binary.AppendUvarint(b, uint64(len(s.UserData)))
	return append(b, s.UserData...), nil
}

// DecodeSubscription decodes a member's metadata.
func DecodeSubscription(data []byte) (Subscription, error) {
	r := reader{buf: data, what: "subscription"}
	var s Subscription
	version := r.version()
	n := r.count(named("topic count"), 2)
	if n > 0 {
		s.Topics = make([]string, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		t := r.string(field{name: "topic", index: i})
		if i > 0 && r.err == nil && t <= s.Topics[i-1] {
			r.fail(field{name: "topic", index: i}, "%q does not sort after %q", t, s.Topics[i-1])
		}
		s.Topics = append(s.Topics, t)
	}
	s.Owned = r.topicPartitions("owned")
	s.Generation = r.int32(named("generation"))
	s.UserData = r.bytes(named("user data"))
	r.end(version)
	if r.err != nil {
		return Subscription{}, r.err
	}
	return s, nil
}

// DecodeMember decodes a member's metadata into a Member.
func DecodeMember(id, instanceID string, metadata []byte) (Member, error) {
	s, err := DecodeSubscription(metadata)
	if err != nil {
		return Member{}, fmt.Errorf("member %q: %w", id, err)
	}
	return Member{ID: id, InstanceID: instanceID, Topics: s.Topics, Owned: s.Owned, Generation: s.Generation}, nil
}

// EncodeAssignment returns the canonical version-1 encoding of a.
func EncodeAssignment(a Assignment) ([]byte, error) {
	tps := canonicalTopicPartitions(a.Topics)
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+tpSize(tps)+len(a.UserData))
	b = binary.BigEndian.AppendUint16(b, AssignmentVersion)
	b, err := appendTopicPartitions(b, tps)
	if err != nil {
		return nil, fmt.Errorf("encode assignment: %w", err)
	}
	b = binary.AppendUvarint(b, uint64(len(a.UserData)))
	return append(b, a.UserData...), nil
}

// DecodeAssignment decodes an assignment.
func DecodeAssignment(data []byte) (Assignment, error) {
	r := reader{buf: data, what: "assignment"}
	var a Assignment
	version := r.version()
	a.Topics = r.topicPartitions("topics")
	a.UserData = r.bytes(named("user data"))
	r.end(version)
	if r.err != nil {
		return Assignment{}, r.err
	}
	return a, nil
}

// EncodedAssignment is one member's encoded assignment.
type EncodedAssignment struct {
	MemberID string
	Data     []byte
}

// EncodeAssignments encodes every member's assignment in the plan, in
// MemberID order, each with the given user data.
func (p Plan) EncodeAssignments(userData []byte) ([]EncodedAssignment, error) {
	out := make([]EncodedAssignment, len(p.Members))
	for i, m := range p.Members {
		data, err := EncodeAssignment(Assignment{Topics: m.Topics, UserData: userData})
		if err != nil {
			return nil, fmt.Errorf("member %q: %w", m.MemberID, err)
		}
		out[i] = EncodedAssignment{MemberID: m.MemberID, Data: data}
	}
	return out, nil
}

func checkTopicName(t string) error {
	switch {
	case t == "":
		return errors.New("empty topic name")
	case len(t) > MaxNameLength:
		return fmt.Errorf("topic name of %d bytes, over the limit of %d", len(t), MaxNameLength)
	}
	return nil
}

func tpSize(tps []TopicPartitions) int {
	n := binary.MaxVarintLen32
	for _, tp := range tps {
		n += 2*binary.MaxVarintLen32 + len(tp.Topic) + binary.MaxVarintLen32*len(tp.Partitions)
	}
	return n
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendTopicPartitions writes canonical tps (see canonicalTopicPartitions).
func appendTopicPartitions(b []byte, tps []TopicPartitions) ([]byte, error) {
	b = binary.AppendUvarint(b, uint64(len(tps)))
	for _, tp := range tps {
		if err := checkTopicName(tp.Topic); err != nil {
			return nil, err
		}
		b = appendString(b, tp.Topic)
		b = binary.AppendUvarint(b, uint64(len(tp.Partitions)))
		for _, p := range tp.Partitions {
			if p < 0 {
				return nil, fmt.Errorf("topic %q: negative partition %d", tp.Topic, p)
			}
			b = binary.AppendUvarint(b, uint64(p))
		}
	}
	return b, nil
}

// reader decodes with explicit bounds checks; the first error sticks and
// every later read returns zero values.
type reader struct {
	buf  []byte
	off  int
	at   int // where the field being read starts, for messages
	what string
	err  error
}

// field names what is being read; it is formatted only on failure, so
// that decoding allocates nothing for names.
type field struct {
	list  string // enclosing list ("owned", "topics"), or ""
	name  string
	index int    // element number, or -1
	topic string // enclosing topic, or ""
}

func (f field) String() string {
	var parts []string
	if f.list != "" {
		parts = append(parts, f.list)
	}
	if f.topic != "" {
		parts = append(parts, fmt.Sprintf("topic %q", f.topic))
	}
	parts = append(parts, f.name)
	if f.index >= 0 {
		parts = append(parts, strconv.Itoa(f.index))
	}
	return strings.Join(parts, " ")
}

func named(name string) field { return field{name: name, index: -1} }

func (r *reader) fail(f field, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s: %s at byte %d: %s", ErrMalformed, r.what, f, r.at, fmt.Sprintf(format, args...))
	}
}

func (r *reader) version() uint16 {
	if len(r.buf) < 2 {
		r.fail(named("version"), "need 2 bytes, have %d", len(r.buf))
		return 0
	}
	v := binary.BigEndian.Uint16(r.buf)
	if v == 0 {
		r.fail(named("version"), "version 0 does not exist")
		return 0
	}
	r.off = 2
	return v
}

func (r *reader) uvarint(field field) uint64 {
	if r.err != nil {
		return 0
	}
	r.at = r.off
	v, n := binary.Uvarint(r.buf[r.off:])
	switch {
	case n == 0:
		r.fail(field, "truncated varint")
		return 0
	case n < 0:
		r.fail(field, "varint overflows 64 bits")
		return 0
	case n != uvarintLen(v):
		r.fail(field, "varint of %d bytes is not minimal", n)
		return 0
	}
	r.off += n
	return v
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// count reads a element count and checks that the rest of the input can
// hold that many elements of at least minSize bytes each, so that no
// input makes the decoder allocate more than its own length.
func (r *reader) count(field field, minSize int) int {
	v := r.uvarint(field)
	if r.err != nil {
		return 0
	}
	if rest := uint64(len(r.buf) - r.off); v > rest/uint64(minSize) {
		r.fail(field, "%d elements cannot fit in the %d bytes left", v, rest)
		return 0
	}
	return int(v)
}

func (r *reader) string(field field) string {
	n := r.uvarint(field)
	switch {
	case r.err != nil:
		return ""
	case n == 0:
		r.fail(field, "empty topic name")
		return ""
	case n > MaxNameLength:
		r.fail(field, "name of %d bytes is over the limit of %d", n, MaxNameLength)
		return ""
	case n > uint64(len(r.buf)-r.off):
		r.fail(field, "name of %d bytes but only %d left", n, len(r.buf)-r.off)
		return ""
	}
	s := string(r.buf[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}

func (r *reader) bytes(field field) []byte {
	n := r.uvarint(field)
	switch {
	case r.err != nil:
		return nil
	case n > uint64(len(r.buf)-r.off):
		r.fail(field, "%d bytes but only %d left", n, len(r.buf)-r.off)
		return nil
	case n == 0:
		return nil
	}
	b := slices.Clone(r.buf[r.off : r.off+int(n)])
	r.off += int(n)
	return b
}

func (r *reader) int32(field field) int32 {
	if r.err != nil {
		return 0
	}
	r.at = r.off
	v, n := binary.Varint(r.buf[r.off:])
	switch {
	case n == 0:
		r.fail(field, "truncated varint")
		return 0
	case n < 0:
		r.fail(field, "varint overflows 64 bits")
		return 0
	case n != uvarintLen(uint64(v<<1)^uint64(v>>63)):
		r.fail(field, "varint of %d bytes is not minimal", n)
		return 0
	case v < math.MinInt32 || v > math.MaxInt32:
		r.fail(field, "%d is outside int32", v)
		return 0
	}
	r.off += n
	return int32(v)
}

func (r *reader) topicPartitions(list string) []TopicPartitions {
	n := r.count(field{list: list, name: "topic count", index: -1}, 3)
	if n == 0 {
		return nil
	}
	out := make([]TopicPartitions, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		t := r.string(field{list: list, name: "topic", index: i})
		if r.err != nil {
			break
		}
		if i > 0 && t <= out[i-1].Topic {
			r.fail(field{list: list, name: "topic", index: i}, "%q does not sort after %q", t, out[i-1].Topic)
			break
		}
		k := r.count(field{list: list, name: "partition count", index: -1, topic: t}, 1)
		if r.err == nil && k == 0 {
			r.fail(field{list: list, name: "partition count", index: -1, topic: t}, "empty partition list")
		}
		parts := make([]int32, 0, k)
		for j := 0; j < k && r.err == nil; j++ {
			f := field{list: list, name: "partition", index: j, topic: t}
			v := r.uvarint(f)
			switch {
			case r.err != nil:
			case v > math.MaxInt32:
				r.fail(f, "%d is over %d", v, math.MaxInt32)
			case j > 0 && int32(v) <= parts[j-1]:
				r.fail(f, "%d does not sort after %d", v, parts[j-1])
			default:
				parts = append(parts, int32(v))
			}
		}
		out = append(out, TopicPartitions{Topic: t, Partitions: parts})
	}
	return out
}

// end checks that a version-1 encoding has nothing left; newer versions
// may carry fields this decoder skips.
func (r *reader) end(version uint16) {
	if r.err == nil && version == 1 && r.off != len(r.buf) {
		r.fail(named("end"), "%d bytes after the last field", len(r.buf)-r.off)
	}
}
