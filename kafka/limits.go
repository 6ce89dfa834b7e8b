package kafka

import (
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortlabs/cohort/fsm"
)

// Bounds on the lists of one request. A list's length is bounded by the
// request's size alone (16 MiB: millions of two-byte names), and each name
// costs work, an entry in the answer, or a part of a Raft entry that every
// replica applies. So a request may name no more groups, topics,
// partitions or members than the cluster's replicated budgets let exist:
// more than that cannot be a real client's request. One over a bound is
// refused before any work, as a malformed request is: the connection
// closes and the log names the list, its length and the bound.

// largestPage asks the engine for its largest pages (it lowers the size to
// its maximum) where the listener reads every page: each page's read goes
// over the names the request asks for again, so fewer pages is less work.
const largestPage = math.MaxInt32

// budgets are the cluster's replicated budgets, a budget not set yet (a
// state that predates budgets, or a new cluster before the leader wrote
// them) at its default.
func (s *Server) budgets() fsm.Budgets {
	b, def := s.cfg.FSM.Budgets(), fsm.DefaultBudgets()
	for _, f := range fsm.BudgetFields() {
		if v := f.Value(&b); *v <= 0 {
			*v = *f.Value(&def)
		}
	}
	return b
}

// overLimit is the refusal of a request with a list over its bound, or
// nil. The budgets are read only for requests with lists.
func (s *Server) overLimit(req kmsg.Request) error {
	switch r := req.(type) {
	case *kmsg.FindCoordinatorRequest:
		return over(req, "coordinator keys", len(r.CoordinatorKeys), s.budgets().Groups, "groups")
	case *kmsg.MetadataRequest:
		return over(req, "topics", len(r.Topics), s.budgets().Topics, "topics")
	case *kmsg.DescribeGroupsRequest:
		return over(req, "groups", len(r.Groups), s.budgets().Groups, "groups")
	case *kmsg.DeleteGroupsRequest:
		return over(req, "groups", len(r.Groups), s.budgets().Groups, "groups")
	case *kmsg.ConsumerGroupDescribeRequest:
		return over(req, "groups", len(r.Groups), s.budgets().Groups, "groups")
	case *kmsg.OffsetFetchRequest:
		b := s.budgets()
		partitions := 0
		for _, t := range r.Topics {
			partitions += len(t.Partitions)
		}
		for _, g := range r.Groups {
			for _, t := range g.Topics {
				partitions += len(t.Partitions)
			}
		}
		if err := over(req, "groups", len(r.Groups), b.Groups, "groups"); err != nil {
			return err
		}
		return over(req, "partitions", partitions, b.Partitions, "partitions")
	case *kmsg.LeaveGroupRequest:
		return over(req, "members", len(r.Members), s.budgets().MembersPerGroup, "members-per-group")
	case *kmsg.CreateTopicsRequest:
		return over(req, "topics", len(r.Topics), s.budgets().Topics, "topics")
	case *kmsg.DeleteTopicsRequest:
		return over(req, "topics", max(len(r.TopicNames), len(r.Topics)), s.budgets().Topics, "topics")
	case *kmsg.FetchRequest:
		partitions := 0
		for _, t := range r.Topics {
			partitions += len(t.Partitions)
		}
		return fetchOverLimit(req, s.budgets(), len(r.Topics)+len(r.ForgottenTopics), partitions)
	case *kmsg.ListOffsetsRequest:
		partitions := 0
		for _, t := range r.Topics {
			partitions += len(t.Partitions)
		}
		return fetchOverLimit(req, s.budgets(), len(r.Topics), partitions)
	case *kmsg.CreatePartitionsRequest:
		return over(req, "topics", len(r.Topics), s.budgets().Topics, "topics")
	}
	return nil
}

// fetchOverLimit bounds a Fetch or ListOffsets: no more topics and
// partitions than may exist. A Fetch holds its request and answer for its
// max wait, so without it a 16 MiB Fetch would hold hundreds of MiB for
// seconds.
func fetchOverLimit(req kmsg.Request, b fsm.Budgets, topics, partitions int) error {
	if err := over(req, "topics", topics, b.Topics, "topics"); err != nil {
		return err
	}
	return over(req, "partitions", partitions, b.Partitions, "partitions")
}

// over is the refusal of a list of n over limit, or nil.
func over(req kmsg.Request, list string, n int, limit int64, budget string) error {
	if int64(n) <= limit {
		return nil
	}
	return fmt.Errorf("%s: %s names %d, over the %s budget of %d", kmsg.NameForKey(req.Key()), list, n, budget, limit)
}

// unique is names without repeats, in the order first named: a name
// repeated in a request is answered once, so that naming a large group or
// topic many times does not multiply the answer.
func unique(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
