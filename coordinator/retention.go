package coordinator

import (
	"context"

	fsmv1 "github.com/cohortlabs/cohort/gen/cohort/fsm/v1"
)

// expireOffsets proposes the retention sweep (Kafka's
// offsets.retention.minutes): offsets of groups without members expire
// retention after the later of their commit and the group becoming empty.
func (e *Engine) expireOffsets(ctx context.Context) {
	actx, cancel := context.WithTimeout(ctx, e.cfg.BarrierTimeout)
	defer cancel()
	before := e.fsm.Stats()
	res, err := e.propose(actx, &fsmv1.Command{Kind: &fsmv1.Command_ExpireOffsets{ExpireOffsets: &fsmv1.ExpireOffsets{
		RetentionMs: e.cfg.OffsetsRetention.Milliseconds(),
	}}})
	if err != nil {
		e.log.Warn("offset retention sweep not applied", "err", err)
		return
	}
	if res.Err == nil {
		after := e.fsm.Stats()
		if before.Offsets != after.Offsets || before.Groups != after.Groups {
			e.log.Info("offsets expired", "offsets_removed", before.Offsets-after.Offsets, "groups_removed", before.Groups-after.Groups,
				"retention", e.cfg.OffsetsRetention)
		}
	}
}
