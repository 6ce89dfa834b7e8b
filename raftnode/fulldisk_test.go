package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// mountTmpfs mounts a tmpfs of the given size (mount(8)'s size=) on a
// fresh directory, unmounted when the test ends. It needs root: without
// it the test is skipped, unless CI is "true", where it fails.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("this test mounts a tmpfs and needs root (euid %d); CI=true requires it to run", os.Geteuid())
		}
		t.Skipf("skipped: mounting a tmpfs needs root (euid %d); run as root, or with CI=true to make this a failure", os.Geteuid())
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount -t tmpfs -o size=%s tmpfs %s: %v", size, dir, err)
	}
	// Registered after TempDir's removal, so it runs before it, and after
	// the nodes' shutdown (registered later still).
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("umount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatalf("fill %s: %v", path, err)
		}
	}
}

func TestFollower_FullDisk_NotReadyUntilSpaceFreed(t *testing.T) {
	disk := mountTmpfs(t, "16m")
	c := newTestCluster(t, 3, func(i int, cfg *Config) {
		if i == 2 {
			cfg.DataDir = filepath.Join(disk, "n3")
		}
	})
	full := c.nodes[2]
	leader := c.leader()
	if leader == full {
		// Filling the leader's disk would move leadership in the middle of
		// the test; this one is about a follower.
		if err := leader.node.raft.LeadershipTransfer().Error(); err != nil {
			t.Fatalf("move leadership off %s: %v", full.node.ID(), err)
		}
		leader = c.leader()
		if leader == full {
			t.Fatalf("leadership stayed on %s", full.node.ID())
		}
	}
	leader.apply(t, createTopic("before", 1))
	// The follower applies "before", so that it has a state to snapshot.
	waitConverged(t, leader, c.nodes...)
	waitFor(t, 20*time.Second, "the follower on the tmpfs to be ready", func() (bool, string) {
		return full.node.Ready()
	})

	filler := filepath.Join(disk, "filler")
	fillDisk(t, filler)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitFor(t, 30*time.Second, "the follower to report its full disk", func() (bool, string) {
		// Keep the log growing until bolt needs a page it cannot have.
		for range 8 {
			if _, err := leader.node.Apply(ctx, bigCommand(4096)); err != nil {
				t.Fatalf("apply on the leader while a follower's disk is full: %v", err)
			}
		}
		ok, reason := full.node.Ready()
		if ok || !strings.Contains(reason, "no space left on device") || !errors.Is(full.node.Fault(), ErrLogWriteFailing) {
			return false, fmt.Sprintf("ready %t, reason %q", ok, reason)
		}
		return true, ""
	})
	// The leader stays fit to serve (its last entry may be committed and
	// not yet applied at the moment of asking: readiness then says so for
	// a moment).
	waitFor(t, 5*time.Second, "the leader ready while a follower's disk is full", func() (bool, string) {
		return leader.node.Ready()
	})
	if full.node.State() == raft.Shutdown {
		t.Fatal("the follower with a full disk shut down")
	}
	// A snapshot cannot be written either; the node says so.
	if err := full.node.Snapshot(ctx); err == nil {
		t.Fatal("a snapshot on a full disk succeeded")
	}
	if err := full.node.Fault(); !errors.Is(err, ErrSnapshotFailing) {
		t.Fatalf("Fault() after a failed snapshot = %v, want ErrSnapshotFailing", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	leader.apply(t, createTopic("after", 1))
	// Ready again once the log is written and a snapshot retried (every
	// snapshotRetryInterval).
	waitFor(t, 60*time.Second, "the follower to be ready again with space freed", func() (bool, string) {
		ok, reason := full.node.Ready()
		return ok && full.node.Fault() == nil, reason
	})
	// Nothing committed while the disk was full is missing on it.
	waitConverged(t, leader, c.nodes...)
}
