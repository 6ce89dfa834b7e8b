package coordinator

import (
	"github.com/cohortlabs/cohort/errcode"
	"github.com/cohortlabs/cohort/fsm"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// invalid builds the InvalidArgument error for a field.
func invalid(format string, args ...any) *errcode.ProtocolError {
	return errcode.Errorf(errcode.InvalidArgument, format, args...)
}

func (l Limits) checkID(field, v string, limit int, required bool) *errcode.ProtocolError {
	switch {
	case required && v == "":
		return invalid("%s is empty", field)
	case len(v) > limit:
		return invalid("%s is %d bytes, over the limit of %d", field, len(v), limit)
	}
	return nil
}

func (l Limits) checkGroupID(id string) *errcode.ProtocolError {
	return l.checkID("group_id", id, l.MaxGroupIDBytes, true)
}

func (l Limits) checkTopic(field, name string) *errcode.ProtocolError {
	if err := l.checkID(field, name, l.MaxTopicNameBytes, true); err != nil {
		return err
	}
	for _, r := range name {
		ok := r == '.' || r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return invalid("%s %q has the character %q; topic names use [a-zA-Z0-9._-]", field, name, r)
		}
	}
	if name == "." || name == ".." {
		return invalid("%s %q is not a valid topic name", field, name)
	}
	return nil
}

func (l Limits) validateJoin(r *cohortv1.JoinGroupRequest) *errcode.ProtocolError {
	if err := l.checkGroupID(r.GetGroupId()); err != nil {
		return err
	}
	if err := l.checkID("member_id", r.GetMemberId(), l.MaxMemberIDBytes, false); err != nil {
		return err
	}
	if err := l.checkID("instance_id", r.GetInstanceId(), l.MaxInstanceIDBytes, false); err != nil {
		return err
	}
	if err := l.checkID("client_id", r.GetClientId(), l.MaxClientIDBytes, false); err != nil {
		return err
	}
	if err := l.checkID("protocol_type", r.GetProtocolType(), l.MaxGroupIDBytes, true); err != nil {
		return err
	}
	switch {
	case r.GetSessionTimeoutMs() <= 0:
		return invalid("session_timeout_ms %d must be positive", r.GetSessionTimeoutMs())
	case r.GetRebalanceTimeoutMs() <= 0:
		return invalid("rebalance_timeout_ms %d must be positive", r.GetRebalanceTimeoutMs())
	case len(r.GetProtocols()) == 0:
		return invalid("protocols is empty: a member must support at least one assignor")
	case len(r.GetProtocols()) > l.MaxProtocols:
		return invalid("protocols has %d entries, over the limit of %d", len(r.GetProtocols()), l.MaxProtocols)
	case len(r.GetTopics()) > l.MaxTopicsPerMember:
		return invalid("topics has %d entries, over the limit of %d", len(r.GetTopics()), l.MaxTopicsPerMember)
	}
	seen := map[string]bool{}
	for i, p := range r.GetProtocols() {
		if err := l.checkID("protocols[].name", p.GetName(), l.MaxGroupIDBytes, true); err != nil {
			return err
		}
		if seen[p.GetName()] {
			return invalid("protocols[%d]: %q is listed twice", i, p.GetName())
		}
		seen[p.GetName()] = true
		if len(p.GetMetadata()) > l.MaxMetadataBytes {
			return invalid("protocols[%d].metadata is %d bytes, over the limit of %d", i, len(p.GetMetadata()), l.MaxMetadataBytes)
		}
	}
	for _, t := range r.GetTopics() {
		if err := l.checkTopic("topics[]", t); err != nil {
			return err
		}
	}
	return nil
}

func (l Limits) validateSync(r *cohortv1.SyncGroupRequest, maxMembers int64) *errcode.ProtocolError {
	if err := l.checkGroupID(r.GetGroupId()); err != nil {
		return err
	}
	if err := l.checkID("member_id", r.GetMemberId(), l.MaxMemberIDBytes, true); err != nil {
		return err
	}
	if err := l.checkID("instance_id", r.GetInstanceId(), l.MaxInstanceIDBytes, false); err != nil {
		return err
	}
	if int64(len(r.GetAssignments())) > maxMembers {
		return invalid("assignments has %d members, over the members-per-group budget of %d", len(r.GetAssignments()), maxMembers)
	}
	total := 0
	for i, a := range r.GetAssignments() {
		if err := l.checkID("assignments[].member_id", a.GetMemberId(), l.MaxMemberIDBytes, true); err != nil {
			return err
		}
		size := len(a.GetAssignment().GetUserData())
		for _, tp := range a.GetAssignment().GetTopics() {
			if err := l.checkTopic("assignments[].topics[].topic", tp.GetTopic()); err != nil {
				return err
			}
			for _, p := range tp.GetPartitions() {
				if p < 0 {
					return invalid("assignments[%d] (member %q): partition %d of topic %q is negative", i, a.GetMemberId(), p, tp.GetTopic())
				}
			}
			size += len(tp.GetTopic()) + 4*len(tp.GetPartitions())
		}
		total += size
	}
	if total > l.MaxAssignmentBytes {
		return invalid("assignments are %d bytes, over the limit of %d", total, l.MaxAssignmentBytes)
	}
	return nil
}

func (l Limits) validateMemberRef(groupID, memberID, instanceID string) *errcode.ProtocolError {
	if err := l.checkGroupID(groupID); err != nil {
		return err
	}
	if err := l.checkID("member_id", memberID, l.MaxMemberIDBytes, false); err != nil {
		return err
	}
	return l.checkID("instance_id", instanceID, l.MaxInstanceIDBytes, false)
}

func (l Limits) validateCommit(r *cohortv1.OffsetCommitRequest) *errcode.ProtocolError {
	if err := l.validateMemberRef(r.GetGroupId(), r.GetMemberId(), r.GetInstanceId()); err != nil {
		return err
	}
	switch {
	case len(r.GetOffsets()) == 0:
		return invalid("offsets is empty")
	case len(r.GetOffsets()) > l.MaxOffsetsPerCommit:
		return invalid("offsets has %d entries, over the limit of %d", len(r.GetOffsets()), l.MaxOffsetsPerCommit)
	case r.GetGeneration() < -1:
		return invalid("generation %d is invalid (use -1 for a standalone commit)", r.GetGeneration())
	}
	for i, o := range r.GetOffsets() {
		if err := l.checkTopic("offsets[].topic", o.GetTopic()); err != nil {
			return err
		}
		if o.GetPartition() < 0 {
			return invalid("offsets[%d]: partition %d of topic %q is negative", i, o.GetPartition(), o.GetTopic())
		}
		if len(o.GetMetadata()) > l.MaxOffsetMetadataBytes {
			return invalid("offsets[%d].metadata is %d bytes, over the limit of %d", i, len(o.GetMetadata()), l.MaxOffsetMetadataBytes)
		}
	}
	return nil
}

func (l Limits) validateTopic(name string, partitions int32, needPartitions bool) *errcode.ProtocolError {
	if err := l.checkTopic("name", name); err != nil {
		return err
	}
	// The budgets (partitions-per-topic, partitions) are the FSM's.
	if needPartitions && (partitions <= 0 || partitions > fsm.MaxTopicPartitions) {
		return invalid("partitions %d is outside 1..%d", partitions, fsm.MaxTopicPartitions)
	}
	return nil
}

// partitionsAsked are the partitions a request names, each once, in the
// order first named; a bad topic name or a negative partition is refused.
func (l Limits) partitionsAsked(tps []*cohortv1.TopicPartitions) ([]offsetKey, error) {
	var asked []offsetKey
	seen := map[offsetKey]bool{}
	for _, tp := range tps {
		if err := l.checkTopic("partitions[].topic", tp.GetTopic()); err != nil {
			return nil, err
		}
		for _, p := range tp.GetPartitions() {
			if p < 0 {
				return nil, invalid("partition %d of topic %q is negative", p, tp.GetTopic())
			}
			if k := (offsetKey{tp.GetTopic(), p}); !seen[k] {
				seen[k] = true
				asked = append(asked, k)
			}
		}
	}
	return asked, nil
}
