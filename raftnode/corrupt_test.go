package raftnode

import (
	"encoding/binary"
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
		"root page":       damageRootPage,
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

// damageRootPage overwrites the page holding the root bucket of the newest
// meta page (bbolt's layout: a 16-byte page header, then the meta fields;
// root page ID at 32, page size at 24, transaction ID at 64), a page that
// is always in use, unlike a fixed page number.
func damageRootPage(b []byte) {
	le := binary.LittleEndian
	pageSize := int(le.Uint32(b[24:]))
	meta := b[:pageSize]
	if other := b[pageSize : 2*pageSize]; le.Uint64(other[64:]) > le.Uint64(meta[64:]) {
		meta = other
	}
	root := int(le.Uint64(meta[32:]))
	fill(b[root*pageSize:(root+1)*pageSize], 0x5A)
}
