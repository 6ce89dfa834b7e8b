package client

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

// Every code the server can send decides the same way in the transport
// (retryable) and in the member (fatal), from errcode alone.
func TestRetryDecisions_FollowErrcode(t *testing.T) {
	fatalCodes := map[errcode.Code]bool{
		errcode.FencedInstanceID: true, errcode.InconsistentGroupProtocol: true, errcode.InvalidSessionTimeout: true,
		errcode.GroupMaxSizeReached: true, errcode.InvalidArgument: true,
	}
	for _, c := range errcode.Codes()[1:] {
		err := fromStatus(protoErr(codes.FailedPrecondition, c.String(), nil))
		if errcode.Of(err) != c {
			t.Fatalf("%s came back as %s", c, errcode.Of(err))
		}
		if got := retryable(err); got != c.Retriable() {
			t.Errorf("retryable(%s) = %t, errcode says %t", c, got, c.Retriable())
		}
		if got := fatal(err); got != fatalCodes[c] {
			t.Errorf("fatal(%s) = %t", c, got)
		}
		if c.Retriable() && fatalCodes[c] {
			t.Errorf("%s is both retriable and fatal", c)
		}
	}
}

func TestRetryDecisions_TransportCodesAndUnknownReasons(t *testing.T) {
	cases := []struct {
		name             string
		err              error
		retryable, fatal bool
	}{
		{"node down", errNodeDown, true, false},
		{"attempt timed out", status.Error(codes.DeadlineExceeded, "slow"), true, false},
		{"bare invalid argument", errInvalidArg, false, true},
		{"permission denied", status.Error(codes.PermissionDenied, "no"), false, true},
		// A newer server's refusal: never resent, and the member rejoins
		// rather than dying on a code it cannot judge.
		{"unknown reason", protoErr(codes.Unavailable, "SOMETHING_NEW", nil), false, false},
		{"closed", ErrClosed, false, true},
		{"context", fmt.Errorf("join: %w", context.Canceled), false, false},
	}
	for _, c := range cases {
		err := fromStatus(c.err)
		if got := retryable(err); got != c.retryable {
			t.Errorf("%s: retryable = %t", c.name, got)
		}
		if got := fatal(c.err); got != c.fatal {
			t.Errorf("%s: fatal = %t", c.name, got)
		}
	}
}

func TestError_IsAndReason(t *testing.T) {
	err := fmt.Errorf("sync: %w", fromStatus(errIllegalGen))
	if !errors.Is(err, ErrIllegalGeneration) || errors.Is(err, ErrUnknownMemberID) {
		t.Fatal("errors.Is against the sentinels")
	}
	// The server's own error type and the client's meet on the code.
	if !errors.Is(err, errcode.Errorf(errcode.IllegalGeneration, "any message")) {
		t.Fatal("errors.Is against a server-side ProtocolError")
	}
	if Reason(err) != "ILLEGAL_GENERATION" || Reason(errIllegalGen) != "ILLEGAL_GENERATION" {
		t.Fatalf("Reason: %q, raw %q", Reason(err), Reason(errIllegalGen))
	}
	if r := Reason(protoErr(codes.FailedPrecondition, "SOMETHING_NEW", nil)); r != "SOMETHING_NEW" {
		t.Fatalf("an unknown reason is still reported: %q", r)
	}
	if ErrorCode(errIllegalGen) != errcode.IllegalGeneration || ErrorCode(errNodeDown) != errcode.Unknown || ErrorCode(nil) != errcode.None {
		t.Fatal("ErrorCode of raw statuses")
	}
	if Reason(errNodeDown) != "" || Reason(nil) != "" {
		t.Fatal("Reason of an error without ErrorInfo")
	}
}

func TestFromCode_UnknownEnumValue(t *testing.T) {
	err := fromCode(cohortv1.ErrorCode(999), "new")
	if err == nil || errcode.Of(err) != errcode.Unknown || Reason(err) != "" {
		t.Fatalf("unknown per-item code: %v (%s)", err, errcode.Of(err))
	}
}
