package main

import (
	"os"
	"testing"

	"github.com/cohortlabs/cohort/internal/proc"
)

// builds builds cohortd once for every process test of this binary.
var builds proc.Builds

func TestMain(m *testing.M) {
	code := m.Run()
	_ = builds.Close()
	os.Exit(code)
}

// cohortdBinary is this package built as a binary.
func cohortdBinary(t *testing.T) string {
	t.Helper()
	return builds.BuildT(t, "github.com/cohortlabs/cohort/cmd/cohortd")
}
