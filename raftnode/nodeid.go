package raftnode

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// nodeIDFile holds the node's Raft server ID inside the data dir. The ID is
// the node's identity in the Raft configuration: reusing a data dir under
// another ID would make one server appear as two.
const nodeIDFile = "node-id"

const maxNodeIDLen = 128

// ValidateNodeID checks a Raft server ID: 1 to maxNodeIDLen characters
// from a safe set (it names files, metrics labels and log fields).
func ValidateNodeID(id string) error {
	if id == "" || len(id) > maxNodeIDLen {
		return fmt.Errorf("node id %q: must be 1 to %d characters", id, maxNodeIDLen)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return fmt.Errorf("node id %q: only letters, digits, '-', '_' and '.' are allowed", id)
		}
	}
	return nil
}

// loadOrCreateNodeID returns the node ID stored in dataDir, creating the
// file with want (or a generated ID) on first start. A want that differs
// from the stored ID is an error: the data dir belongs to another node.
func loadOrCreateNodeID(dataDir, want string) (string, error) {
	path := filepath.Join(dataDir, nodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		stored := strings.TrimSpace(string(b))
		if err := ValidateNodeID(stored); err != nil {
			return "", fmt.Errorf("read %s: %w", path, err)
		}
		if want != "" && want != stored {
			return "", fmt.Errorf("data dir %s belongs to node %q, but node id %q was given: use the stored id or another data dir", dataDir, stored, want)
		}
		return stored, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("read node id: %w", err)
	}

	id := want
	if id == "" {
		var r [6]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", fmt.Errorf("generate node id: %w", err)
		}
		id = "node-" + hex.EncodeToString(r[:])
	}
	if err := writeFileAtomic(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("store node id %q in %s: %w", id, path, err)
	}
	return id, nil
}

// writeFileAtomic writes via a synced temporary file and a rename, so a
// crash never leaves a half-written identity behind.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
