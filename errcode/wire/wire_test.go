package wire

import (
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/errcode"
	cohortv1 "github.com/cohortlabs/cohort/gen/cohort/v1"
)

func TestEveryCodeHasAnEnumValue_AndBack(t *testing.T) {
	for _, c := range errcode.Codes() {
		e, ok := ToEnum(c)
		if !ok {
			t.Errorf("code %s has no cohort.v1 ErrorCode value: add a row to the table", c)
			continue
		}
		if back, ok := FromEnum(e); !ok || back != c {
			t.Errorf("code %s -> %s -> %s (%t)", c, e, back, ok)
		}
	}
}

func TestEveryEnumValueHasACode(t *testing.T) {
	for v, name := range cohortv1.ErrorCode_name {
		c, ok := FromEnum(cohortv1.ErrorCode(v))
		if !ok {
			t.Errorf("enum %s has no errcode: add the code to errcode and a row to the table", name)
			continue
		}
		if e, _ := ToEnum(c); e != cohortv1.ErrorCode(v) {
			t.Errorf("enum %s -> %s -> %s", name, c, e)
		}
	}
}

// The table is explicit, but a row pairing two different names would be a
// wire change nobody meant: the enum's name is the code's, prefixed.
func TestTableRowsPairTheSameName(t *testing.T) {
	for _, r := range table {
		if name, _ := strings.CutPrefix(r.enum.String(), "ERROR_CODE_"); name != r.code.String() {
			t.Errorf("row pairs %s with %s", r.code, r.enum)
		}
	}
}

func TestUnknownHasNoEnumValue(t *testing.T) {
	if _, ok := ToEnum(errcode.Unknown); ok {
		t.Error("errcode.Unknown has a wire value")
	}
	if c, ok := FromEnum(cohortv1.ErrorCode(9999)); ok || c != errcode.Unknown {
		t.Errorf("FromEnum(9999) = %s, %t", c, ok)
	}
}
