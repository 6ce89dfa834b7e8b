package coordinator

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A member must be able to join again with the ID it was handed, so a
// generated ID never exceeds the member ID limit, whatever the client ID.
func TestNewMemberID_FitsTheLimit(t *testing.T) {
	t.Parallel()
	limit := DefaultLimits().MaxMemberIDBytes
	for name, clientID := range map[string]string{
		"empty":                   "",
		"short":                   "billing-worker",
		"at the client id limit":  strings.Repeat("c", DefaultLimits().MaxClientIDBytes),
		"multi-byte at the limit": strings.Repeat("é", DefaultLimits().MaxClientIDBytes/2),
	} {
		id := newMemberID(clientID, limit)
		if len(id) > limit || !utf8.ValidString(id) {
			t.Errorf("%s: id of %d bytes (limit %d), valid UTF-8 %t", name, len(id), limit, utf8.ValidString(id))
		}
		want := clientID
		if want == "" {
			want = "member"
		}
		if prefix := id[:len(id)-33]; !strings.HasPrefix(want, prefix) || prefix == "" {
			t.Errorf("%s: id %q does not start with the client id", name, id)
		}
	}
	if a, b := newMemberID("x", limit), newMemberID("x", limit); a == b {
		t.Errorf("two generated ids are equal: %s", a)
	}
}

func TestLimits_MemberIDLimitFitsGeneratedIDs(t *testing.T) {
	t.Parallel()
	l := DefaultLimits()
	l.MaxMemberIDBytes = minMemberIDBytes - 1
	if err := l.Validate(); err == nil {
		t.Fatalf("a member id limit of %d bytes was accepted", l.MaxMemberIDBytes)
	}
	l.MaxMemberIDBytes = minMemberIDBytes
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
}
