package fsm

import "github.com/cohortlabs/cohort/errcode"

// ErrTopicAlreadyExists is errcode.ErrTopicAlreadyExists under its old
// name, kept only while raftnode's tests (being rewritten) still use it;
// the fsm's errors are errcode's. Remove it once nothing names it.
var ErrTopicAlreadyExists = errcode.ErrTopicAlreadyExists
