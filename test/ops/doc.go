// Package ops holds the operator scenarios of Cohort run against the real
// binaries: three to five cohortd processes on loopback, driven with
// cohortctl and the client library. The tests build cohortd and cohortctl
// once (TestMain) and share them.
package ops
