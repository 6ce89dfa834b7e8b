package fsm

import (
	"github.com/cohortlabs/cohort/errcode"
	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// Hard bounds the FSM enforces whatever the configured request limits are,
// so that no command can make the state unreasonable.
const (
	MaxTopicPartitions = 1 << 20
	MaxNameLength      = 1024
)

// apply applies one command. Every path that refuses a command returns
// before changing anything.
func (s *State) apply(cmd *fsmv1.Command) (res *ApplyResult) {
	defer func() {
		if res.Err == nil {
			// Only a command that may have changed the state: a refused
			// one changes nothing, not even this.
			s.rulesSeen = max(s.rulesSeen, s.rules)
		}
		s.settleSizes()
		s.epoch++ // freeze every group this command touched
	}()
	s.rules = cmd.GetVersion()
	now := cmd.GetTimestampMs()
	switch c := cmd.GetKind().(type) {
	case *fsmv1.Command_JoinMember:
		return s.joinMember(now, c.JoinMember)
	case *fsmv1.Command_CompleteJoin:
		return s.completeJoinCmd(now, c.CompleteJoin)
	case *fsmv1.Command_SyncAssignment:
		return s.syncAssignment(now, c.SyncAssignment)
	case *fsmv1.Command_RemoveMembers:
		return s.removeMembers(now, c.RemoveMembers)
	case *fsmv1.Command_CommitOffsets:
		return s.commitOffsets(now, c.CommitOffsets)
	case *fsmv1.Command_DeleteGroups:
		return s.deleteGroups(c.DeleteGroups)
	case *fsmv1.Command_ExpireOffsets:
		return s.expireOffsets(now, c.ExpireOffsets)
	case *fsmv1.Command_CreateTopic:
		return s.createTopic(now, c.CreateTopic)
	case *fsmv1.Command_DeleteTopic:
		return s.deleteTopic(now, c.DeleteTopic)
	case *fsmv1.Command_AddPartitions:
		return s.addPartitions(now, c.AddPartitions)
	case *fsmv1.Command_RegisterNode:
		return s.registerNode(c.RegisterNode)
	case *fsmv1.Command_Batch:
		return s.batch(now, cmd.GetVersion(), c.Batch)
	case *fsmv1.Command_SetBudgets:
		return s.setBudgets(c.SetBudgets)
	case *fsmv1.Command_DeleteOffsets:
		return s.deleteOffsets(c.DeleteOffsets)
	case *fsmv1.Command_ConsumerHeartbeat:
		return s.consumerHeartbeat(now, c.ConsumerHeartbeat)
	case nil:
		return fail(errcode.Errorf(errcode.InvalidArgument, "command has no kind"))
	default:
		return fail(errcode.Errorf(errcode.InvalidArgument, "unknown command kind %T", c))
	}
}

func fail(err *errcode.ProtocolError) *ApplyResult { return &ApplyResult{Err: err} }

// MaxBatch bounds the commands of one Batch entry.
const MaxBatch = 4096

// batch applies each command in order with the batch's timestamp. Each has
// its own result; one refused command does not stop the others, since they
// are independent requests that happen to share an entry.
func (s *State) batch(now int64, version uint32, b *fsmv1.Batch) *ApplyResult {
	cmds := b.GetCommands()
	switch {
	case len(cmds) == 0:
		return fail(errcode.Errorf(errcode.InvalidArgument, "batch is empty"))
	case len(cmds) > MaxBatch:
		return fail(errcode.Errorf(errcode.InvalidArgument, "batch has %d commands, over the limit of %d", len(cmds), MaxBatch))
	}
	for i, c := range cmds {
		if _, nested := c.GetKind().(*fsmv1.Command_Batch); nested {
			return fail(errcode.Errorf(errcode.InvalidArgument, "batch command %d is itself a batch", i))
		}
	}
	res := &ApplyResult{Batch: make([]*ApplyResult, len(cmds))}
	for i, c := range cmds {
		res.Batch[i] = s.apply(&fsmv1.Command{TimestampMs: now, Version: version, Kind: c.GetKind()})
	}
	return res
}

func checkName(field, v string) *errcode.ProtocolError {
	switch {
	case v == "":
		return errcode.Errorf(errcode.InvalidArgument, "%s is empty", field)
	case len(v) > MaxNameLength:
		return errcode.Errorf(errcode.InvalidArgument, "%s is %d bytes, over the limit of %d", field, len(v), MaxNameLength)
	}
	return nil
}
