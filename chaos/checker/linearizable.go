package checker

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/cohortlabs/cohort/chaos/history"
)

// registerInput is a porcupine input: a write of value, or a read.
type registerInput struct {
	write bool
	value int64
}

// Register is the model of one committed offset: a read returns the last
// written value, -1 before any write.
var Register = porcupine.Model{
	Init: func() any { return int64(-1) },
	Step: func(state, input, output any) (bool, any) {
		in := input.(registerInput)
		if in.write {
			return true, in.value
		}
		return output.(int64) == state.(int64), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(registerInput)
		if in.write {
			return fmt.Sprintf("write(%d)", in.value)
		}
		return fmt.Sprintf("read() -> %d", output.(int64))
	},
	DescribeState: func(state any) string { return fmt.Sprint(state.(int64)) },
}

// Linearizable is checker 1: every offsets register (one key: group, topic,
// partition) must be linearizable, written by standalone commits and read by
// OffsetFetch. Writes with unknown outcome stay open to the end of the
// history (porcupine's reading of a crashed operation); reads that failed or
// timed out constrain nothing and are left out, as are refused writes, and
// so are writes with unknown outcome whose value no read returned (see
// dropUnobserved).
func Linearizable(es []history.Entry, o Options) Result {
	o = o.withDefaults()
	byKey := map[history.Key][]history.Entry{}
	var end int64
	for _, e := range ops(es, history.FRead, history.FWrite) {
		byKey[e.Key()] = append(byKey[e.Key()], e)
		end = max(end, e.End, e.Start)
	}
	for k, kes := range byKey {
		byKey[k] = dropUnobserved(kes)
	}
	if len(byKey) == 0 {
		return skipped(NameLinearizable, "no offsets operations in the history")
	}
	keys := sortedKeys(byKey)
	var as []Anomaly
	checked := 0
	for _, k := range keys {
		var hist []porcupine.Operation
		var src []history.Entry
		for _, e := range byKey[k] {
			op, ok := porcupineOp(e, end)
			if !ok {
				continue
			}
			op.Metadata = len(src)
			hist = append(hist, op)
			src = append(src, e)
		}
		checked += len(hist)
		res, info := porcupine.CheckOperationsVerbose(Register, hist, o.LinearizabilityTimeout)
		switch res {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			as = append(as, Anomaly{Kind: KindUnchecked, Message: fmt.Sprintf(
				"key %s: porcupine could not decide linearizability of %d operations within %v", k, len(hist), o.LinearizabilityTimeout)})
			continue
		}
		a := explainNonLinearizable(k, hist, src, info)
		if o.VisualizeDir != "" {
			name := strings.NewReplacer("/", "_", " ", "_").Replace(k.String())
			path := filepath.Join(o.VisualizeDir, "linearizability-"+name+".html")
			if err := os.MkdirAll(o.VisualizeDir, 0o755); err == nil {
				if err := porcupine.VisualizePath(Register, info, path); err == nil {
					a.Message += "; visualization: " + filepath.Base(path)
				}
			}
		}
		as = append(as, a)
	}
	return result(NameLinearizable, checked, as)
}

// dropUnobserved leaves out the writes with unknown outcome whose value no
// successful read of the key returned. Each such write stays open to the end
// of the history, and porcupine must try it at every point: k of them make
// 2^k candidate sets, and a fault-heavy run leaves dozens on one key (CI once
// gave up on 234 operations after 30 s). Leaving them out decides the same
// question: a linearization with such a write has no read between it and
// the next write (that read would have returned its value), so removing it
// changes no read; and a linearization without it takes it back as its last
// operation (it never returned, so nothing must follow it), where no read
// sees it.
func dropUnobserved(es []history.Entry) []history.Entry {
	read := map[int64]bool{}
	for _, e := range es {
		if e.F == history.FRead && e.Outcome == history.OK && e.Value != nil {
			read[*e.Value] = true
		}
	}
	return slices.DeleteFunc(slices.Clone(es), func(e history.Entry) bool {
		return e.F == history.FWrite && e.Outcome == history.Info && e.Value != nil && !read[*e.Value]
	})
}

func porcupineOp(e history.Entry, end int64) (porcupine.Operation, bool) {
	var v int64 = -1
	if e.Value != nil {
		v = *e.Value
	}
	op := porcupine.Operation{ClientId: e.Process, Call: e.Start, Return: e.End}
	switch {
	case e.F == history.FWrite && e.Outcome == history.OK:
		op.Input, op.Output = registerInput{write: true, value: v}, int64(0)
	case e.F == history.FWrite && e.Outcome == history.Info:
		// May take effect any time after its invocation: it never returns.
		op.Input, op.Output, op.Return = registerInput{write: true, value: v}, int64(0), end+1
	case e.F == history.FRead && e.Outcome == history.OK:
		op.Input, op.Output = registerInput{}, v
	default:
		return op, false
	}
	return op, true
}

// explainNonLinearizable names the first operation that no linearization of
// the longest linearizable prefix can take, with the writes around it.
func explainNonLinearizable(k history.Key, hist []porcupine.Operation, src []history.Entry, info porcupine.LinearizationInfo) Anomaly {
	in := map[int]bool{}
	longest := 0
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > longest {
				longest = len(lin)
				in = map[int]bool{}
				for _, i := range lin {
					in[i] = true
				}
			}
		}
	}
	// The op the search got stuck on: the earliest-returning one outside
	// the longest partial linearization.
	stuck := -1
	for i, op := range hist {
		if in[i] {
			continue
		}
		if stuck < 0 || op.Return < hist[stuck].Return {
			stuck = i
		}
	}
	msg := fmt.Sprintf("key %s is not linearizable (%d operations)", k, len(hist))
	if stuck < 0 {
		return Anomaly{Kind: KindNonLinearizable, Message: msg}
	}
	bad := src[stuck]
	msg += fmt.Sprintf("; no linearization admits %s by process %d at %s..%s", describe(bad), bad.Process, secs(bad.Start), secs(bad.End))
	// Evidence: the op itself, then the writes that completed before it
	// started or overlapped it (the last few).
	var ctx []history.Entry
	for _, e := range src {
		if e.F == history.FWrite && e.Start < bad.End && (e.Outcome == history.OK || e.Outcome == history.Info) {
			ctx = append(ctx, e)
		}
	}
	if len(ctx) > 6 {
		ctx = ctx[len(ctx)-6:]
	}
	return Anomaly{Kind: KindNonLinearizable, Message: msg, Ops: append([]history.Entry{bad}, ctx...)}
}

func describe(e history.Entry) string {
	v := int64(-1)
	if e.Value != nil {
		v = *e.Value
	}
	if e.F == history.FRead {
		return fmt.Sprintf("read -> %d", v)
	}
	return fmt.Sprintf("%s(%d) [%s]", e.F, v, e.Outcome)
}
