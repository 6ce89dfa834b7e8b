// Package chaos runs Cohort's Jepsen-style failure suite: real cohortd
// processes (package cluster), faults injected from outside on a seeded
// schedule (package nemesis), concurrent clients recording every operation
// (package workload, into a history from package history), and checkers that
// decide from the history alone whether the run kept Cohort's promises
// (package checker). Run ties them together and writes the report (package
// report) to store/<run>/.
//
// What it must never do: send traffic anywhere but loopback and the private
// network it creates itself, or leave behind a namespace, link, iptables
// rule, process or temporary directory after it returns — also after a
// failure or an interrupt.
package chaos
