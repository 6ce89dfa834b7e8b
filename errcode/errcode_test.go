package errcode

import (
	"errors"
	"fmt"
	"testing"
)

func TestCodes_TableIsComplete(t *testing.T) {
	names := map[string]Code{}
	for i, c := range Codes() {
		if c != Code(i) {
			t.Fatalf("Codes()[%d] = %d", i, c)
		}
		if c == None {
			if _, ok := Lookup(c); ok {
				t.Error("NONE has an Error")
			}
			continue
		}
		e, ok := Lookup(c)
		if !ok || e == nil {
			t.Fatalf("code %d has no Error", c)
		}
		if e.Code != c {
			t.Errorf("errs[%d].Code = %d", c, e.Code)
		}
		if e.Name == "" || e.Description == "" {
			t.Errorf("code %d: name %q, description %q", c, e.Name, e.Description)
		}
		if prev, dup := names[e.Name]; dup {
			t.Errorf("name %s used by codes %d and %d", e.Name, prev, c)
		}
		names[e.Name] = c
	}
}

func TestNamesRoundTrip(t *testing.T) {
	for _, c := range Codes() {
		got, ok := ByName(c.String())
		if !ok || got != c {
			t.Errorf("ByName(%q) = %s, %t; want %d", c.String(), got, ok, c)
		}
	}
	for _, bad := range []string{"", "UNKNOWN", "unknown_member_id", "ERROR_CODE_NOT_LEADER", "CODE_99"} {
		if c, ok := ByName(bad); ok || c != Unknown {
			t.Errorf("ByName(%q) = %s, %t", bad, c, ok)
		}
	}
}

// The names are the ErrorInfo reasons on the wire: changing one breaks
// every client that switches on it.
func TestNames_AreTheWireReasons(t *testing.T) {
	want := map[Code]string{
		None: "NONE", InvalidArgument: "INVALID_ARGUMENT", UnknownMemberID: "UNKNOWN_MEMBER_ID",
		IllegalGeneration: "ILLEGAL_GENERATION", RebalanceInProgress: "REBALANCE_IN_PROGRESS",
		NotOwner: "NOT_OWNER", InvalidAssignment: "INVALID_ASSIGNMENT",
		InconsistentGroupProtocol: "INCONSISTENT_GROUP_PROTOCOL", FencedInstanceID: "FENCED_INSTANCE_ID",
		GroupIDNotFound: "GROUP_ID_NOT_FOUND", NonEmptyGroup: "NON_EMPTY_GROUP",
		UnknownTopicOrPartition: "UNKNOWN_TOPIC_OR_PARTITION", TopicAlreadyExists: "TOPIC_ALREADY_EXISTS",
		InvalidPartitions: "INVALID_PARTITIONS", CoordinatorNotAvailable: "COORDINATOR_NOT_AVAILABLE",
		NotCoordinator: "NOT_COORDINATOR", MemberIDRequired: "MEMBER_ID_REQUIRED",
		GroupMaxSizeReached: "GROUP_MAX_SIZE_REACHED", InvalidSessionTimeout: "INVALID_SESSION_TIMEOUT",
		NotLeader: "NOT_LEADER", StaleCommand: "STALE_COMMAND",
		UnknownServer: "UNKNOWN_SERVER", ServerLagging: "SERVER_LAGGING", QuorumAtRisk: "QUORUM_AT_RISK",
		LastVoter: "LAST_VOTER", ConfigurationConflict: "CONFIGURATION_CONFLICT", AutopilotManaged: "AUTOPILOT_MANAGED",
		BudgetExceeded: "BUDGET_EXCEEDED", GroupSubscribedToTopic: "GROUP_SUBSCRIBED_TO_TOPIC",
		FencedMemberEpoch: "FENCED_MEMBER_EPOCH", UnsupportedAssignor: "UNSUPPORTED_ASSIGNOR", StaleMemberEpoch: "STALE_MEMBER_EPOCH", UnreleasedInstanceID: "UNRELEASED_INSTANCE_ID",
		InvalidRegularExpression: "INVALID_REGULAR_EXPRESSION",
	}
	if len(want) != len(Codes()) {
		t.Fatalf("%d codes, %d expected names", len(Codes()), len(want))
	}
	for c, name := range want {
		if c.String() != name {
			t.Errorf("code %d is %q, want %q", c, c.String(), name)
		}
	}
	if Unknown.String() != "UNKNOWN" || Code(77).String() != "CODE_77" {
		t.Errorf("non-codes print as %q and %q", Unknown, Code(77))
	}
}

func TestRetriable_OnlyLeadershipInTransit(t *testing.T) {
	retriable := map[Code]bool{NotLeader: true, CoordinatorNotAvailable: true, NotCoordinator: true}
	for _, c := range append(Codes(), Unknown, Code(77)) {
		if c.Retriable() != retriable[c] {
			t.Errorf("%s.Retriable() = %t", c, c.Retriable())
		}
	}
}

func TestOf(t *testing.T) {
	cases := []struct {
		err  error
		want Code
	}{
		{nil, None},
		{errors.New("disk on fire"), Unknown},
		{ErrNotOwner, NotOwner},
		{Errorf(IllegalGeneration, "gen %d", 3), IllegalGeneration},
		{fmt.Errorf("commit: %w", Errorf(NotLeader, "lost")), NotLeader},
		{errors.Join(errors.New("x"), ErrFencedInstanceID), FencedInstanceID},
		{coded{UnknownMemberID}, UnknownMemberID},
	}
	for _, c := range cases {
		if got := Of(c.err); got != c.want {
			t.Errorf("Of(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	if !IsRetriable(fmt.Errorf("w: %w", Errorf(NotLeader, "x"))) || IsRetriable(ErrRebalanceInProgress) || IsRetriable(nil) || IsRetriable(errors.New("x")) {
		t.Error("IsRetriable disagrees with the codes")
	}
}

// coded is another package's error type carrying a code.
type coded struct{ c Code }

func (e coded) Error() string   { return "coded " + e.c.String() }
func (e coded) ErrorCode() Code { return e.c }

func TestIs_DetailedMatchesSentinelAndSameCode(t *testing.T) {
	err := fmt.Errorf("sync: %w", Errorf(IllegalGeneration, "group %q is at generation %d", "g", 4))
	if !errors.Is(err, ErrIllegalGeneration) {
		t.Error("a detailed ILLEGAL_GENERATION is not ErrIllegalGeneration")
	}
	if errors.Is(err, ErrUnknownMemberID) {
		t.Error("ILLEGAL_GENERATION matched ErrUnknownMemberID")
	}
	if !errors.Is(err, Errorf(IllegalGeneration, "other message")) {
		t.Error("two ILLEGAL_GENERATIONs with different messages differ")
	}
	if !errors.Is(err, coded{IllegalGeneration}) || errors.Is(err, coded{NotOwner}) {
		t.Error("a detailed error does not match a foreign Coder by code")
	}
	if errors.Is(err, errors.New("ILLEGAL_GENERATION")) {
		t.Error("matched a plain error by text")
	}
}

func TestAs_ReachesTheDetail(t *testing.T) {
	err := fmt.Errorf("join: %w", Errorf(FencedInstanceID, "instance %q", "i-1"))
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Code != FencedInstanceID || pe.Msg != `instance "i-1"` {
		t.Fatalf("errors.As: %+v", pe)
	}
	var c Coder
	if !errors.As(err, &c) || c.ErrorCode() != FencedInstanceID {
		t.Fatal("errors.As onto Coder failed")
	}
}

func TestErrorStrings(t *testing.T) {
	if s := Errorf(NotOwner, "partition %d", 3).Error(); s != "NOT_OWNER: partition 3" {
		t.Errorf("detailed: %q", s)
	}
	if s := (&ProtocolError{Code: NotOwner}).Error(); s != "NOT_OWNER" {
		t.Errorf("bare: %q", s)
	}
	if s := ErrNotOwner.Error(); s != "NOT_OWNER" {
		t.Errorf("sentinel: %q", s)
	}
}
