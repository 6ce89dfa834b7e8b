package raftnode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohortlabs/cohort/fsm"
)

// A damaged log store is an error naming the file, never a panic (which
// would become a crash loop under a supervisor).
func TestNew_CorruptLogStore_ErrorNamesTheFile(t *testing.T) {
	tn := newSingleNode(t, testConfig(t, "solo"))
	waitFor(t, 10e9, "single node leads", func() (bool, string) { return tn.node.IsLeader(), "" })
	tn.apply(t, createTopic("t", 3))
	tn.stop()

	db := filepath.Join(tn.cfg.DataDir, "raft", "raft.db")
	for name, damage := range map[string]func(b []byte){
		"meta pages":      func(b []byte) { fill(b[:8192], 0xA5) },
		"every data page": func(b []byte) { fill(b[2*4096:], 0x5A) },
		"one data page":   func(b []byte) { fill(b[4*4096:5*4096], 0x5A) },
		"truncated file":  nil,
	} {
		t.Run(name, func(t *testing.T) {
			orig, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			b := append([]byte(nil), orig...)
			if damage != nil {
				damage(b)
			} else {
				b = b[:4096+100]
			}
			if err := os.WriteFile(db, b, 0o600); err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(db, orig, 0o600)
			n, err := New(tn.cfg, fsm.New())
			if err == nil {
				n.Shutdown(t.Context())
				t.Fatal("the damaged log store opened without an error")
			}
			t.Log(err)
			if !strings.Contains(err.Error(), db) {
				t.Fatalf("error %q does not name %s", err, db)
			}
		})
	}
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}
