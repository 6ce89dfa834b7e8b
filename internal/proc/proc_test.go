package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReservePorts_OutsideEphemeralRangeDistinctAndLocked(t *testing.T) {
	ranges, err := portRanges()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no ip_local_port_range: ", err)
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		t.Fatal(err)
	}
	a := PortsT(t, 40)
	other := PortsT(t, 40)
	run := PortRunT(t, 5)
	seen := map[int]bool{}
	for _, p := range append(append(append([]int{}, a...), other...), run, run+1, run+2, run+3, run+4) {
		if p >= lo && p <= hi {
			t.Errorf("port %d is in the ephemeral range %d-%d", p, lo, hi)
		}
		if p < lowestPort || p > 65535 {
			t.Errorf("port %d is outside %v", p, ranges)
		}
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	// A held port cannot be taken again, even by another reservation.
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("cohort-ports-%d", os.Getuid()))
	if f, err := take(dir, a[0]); err == nil {
		f.Close()
		t.Fatalf("port %d taken while reserved", a[0])
	}
	// Released, it can; and the port is free to listen on.
	r, err := ReservePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Ports[0]
	r.Release()
	r.Release()
	f, err := take(dir, p)
	if err != nil {
		t.Fatalf("port %d not available after release: %v", p, err)
	}
	f.Close()
}

func TestPick_RunStaysInsideOneRange(t *testing.T) {
	ranges := [][2]int{{100, 104}, {200, 201}}
	for range 1000 {
		base, ok := pick(ranges, 3)
		if !ok || base < 100 || base+2 > 104 {
			t.Fatalf("run of 3 from %d (ok %t) leaves %v", base, ok, ranges)
		}
	}
	if _, ok := pick(ranges, 6); ok {
		t.Fatalf("a run of 6 fits none of %v", ranges)
	}
}

// procState is the state letter of /proc/<pid>/stat (S, R, T, Z...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "gone"
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func TestProcess_PauseResumeKill(t *testing.T) {
	p := StartT(t, Spec{Name: "sleeper", Path: "sleep", Args: []string{"60"}})
	if p.Exited() || p.Err() != nil {
		t.Fatalf("sleep exited at once: %v", p.Err())
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 5*time.Second, "sleep stopped", func() (bool, string) {
		s := procState(t, p.Pid())
		return s == "T", "state " + s
	})
	if !p.Paused() {
		t.Fatal("Paused() false after Pause")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 5*time.Second, "sleep running again", func() (bool, string) {
		s := procState(t, p.Pid())
		return s == "S" || s == "R", "state " + s
	})
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if !p.Exited() || !errors.As(p.Err(), &ee) || !strings.Contains(p.Err().Error(), "killed") {
		t.Fatalf("after Kill: exited %t, err %v; want killed", p.Exited(), p.Err())
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("second Kill: %v", err)
	}
	if err := p.Pause(); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Pause of an exited process: %v, want ErrProcessDone", err)
	}
	if !strings.Contains(p.Log().String(), "sleeper (pid") || !strings.Contains(p.Log().String(), "exited: signal: killed") {
		t.Fatalf("log lacks the exit line:\n%s", p.Log())
	}
}

// trapTERM exits 0 on SIGTERM (and keeps no child that holds the pipe).
const trapTERM = `trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done`

func TestProcess_StopHandlesSIGTERMEvenWhenPaused(t *testing.T) {
	p := StartT(t, Spec{Name: "trap", Path: "sh", Args: []string{"-c", trapTERM}})
	WaitFor(t, 5*time.Second, "the trap to be set", func() (bool, string) {
		return strings.Contains(p.Log().String(), "\nready\n"), p.Log().String()
	})
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v, want exit status 0", err)
	}
	if !strings.Contains(p.Log().String(), "\ngot TERM\n") {
		t.Fatalf("SIGTERM not handled:\n%s", p.Log())
	}
}

func TestProcess_StopKillsWhatIgnoresSIGTERM(t *testing.T) {
	p := StartT(t, Spec{Path: "sh", Args: []string{"-c", `trap '' TERM; echo ready; sleep 60`}, OwnGroup: true})
	WaitFor(t, 5*time.Second, "the trap to be set", func() (bool, string) {
		return strings.Contains(p.Log().String(), "\nready\n"), p.Log().String()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := p.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "killed") || !p.Exited() {
		t.Fatalf("Stop of a process ignoring SIGTERM: %v (exited %t)", err, p.Exited())
	}
}

func TestProcess_LogCapturedToMemoryAndFileAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.log")
	log, err := OpenLog(path, DefaultKeep)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		p, err := Start(Spec{Name: "n1", Path: "sh", Args: []string{"-c", fmt.Sprintf("echo out%d; echo err%d >&2; exit 3", i, i)}, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = p.Wait(ctx)
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Fatalf("Wait: %v, want exit status 3", err)
		}
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{log.String(), string(file)} {
		for _, want := range []string{"=== n1: start #1 at ", "=== n1: start #2 at ", "out0\n", "err0\n", "out1\n", "err1\n", "exited: exit status 3"} {
			if !strings.Contains(s, want) {
				t.Errorf("log lacks %q:\n%s", want, s)
			}
		}
	}
	if got := log.Tail(1); !strings.Contains(got, "exited: exit status 3") {
		t.Errorf("Tail(1) = %q", got)
	}
}

func TestProcess_WrapperRunsTheProgram(t *testing.T) {
	p := StartT(t, Spec{Path: "sh", Args: []string{"-c", "echo $WRAPPED"}, Wrapper: []string{"env", "WRAPPED=yes"}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Log().String(), "\nyes\n") {
		t.Fatalf("wrapper did not run the program with its setting:\n%s", p.Log())
	}
}

func TestProcess_WaitDeadlineOnARunningProcess(t *testing.T) {
	p := StartT(t, Spec{Path: "sleep", Args: []string{"60"}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Wait(ctx); !errors.Is(err, ErrRunning) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want ErrRunning and DeadlineExceeded", err)
	}
}

func TestStart_MissingProgramFails(t *testing.T) {
	if _, err := Start(Spec{Name: "x", Path: filepath.Join(t.TempDir(), "nothing")}); err == nil || !strings.Contains(err.Error(), "start x") {
		t.Fatalf("start of a missing program: %v", err)
	}
}

func TestLog_KeepsTheLastLinesWhole(t *testing.T) {
	l := NewLog(100)
	for i := range 100 {
		fmt.Fprintf(l, "line %03d\n", i)
	}
	s := l.String()
	if !strings.HasPrefix(s, "=== ") || !strings.Contains(s, "earlier bytes dropped\nline ") || !strings.HasSuffix(s, "line 099\n") {
		t.Fatalf("kept output:\n%s", s)
	}
	kept := strings.SplitN(s, "\n", 2)[1]
	if len(kept) < 100 || len(kept) > 200 {
		t.Fatalf("kept %d bytes, want 100 to 200", len(kept))
	}
	if none := NewLog(0); func() bool { fmt.Fprintln(none, "x"); return none.String() != "" }() {
		t.Fatal("a log keeping 0 bytes kept some")
	}
	if Tail("a\nb\nc\n", 2) != "b\nc" || Tail("a\nb", 0) != "a\nb" {
		t.Fatalf("Tail: %q %q", Tail("a\nb\nc\n", 2), Tail("a\nb", 0))
	}
}

// fakeTB records a failure instead of ending the goroutine.
type fakeTB struct {
	failed bool
	msg    string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Logf(string, ...any)            {}
func (f *fakeTB) Cleanup(func())                 {}
func (f *fakeTB) Failed() bool                   { return f.failed }
func (f *fakeTB) Fatalf(format string, a ...any) { f.failed, f.msg = true, fmt.Sprintf(format, a...) }

func TestWaitFor_TimeoutSaysWhatAndLastDetail(t *testing.T) {
	var ft fakeTB
	calls := 0
	start := time.Now()
	WaitFor(&ft, 100*time.Millisecond, "the answer", func() (bool, string) {
		calls++
		return false, fmt.Sprintf("still %d", calls)
	})
	if !ft.failed || !strings.HasPrefix(ft.msg, "timed out after ") || !strings.Contains(ft.msg, "waiting for the answer; last: still ") {
		t.Fatalf("message %q", ft.msg)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second || calls < 3 {
		t.Fatalf("waited %v with %d calls", d, calls)
	}
	if !strings.HasSuffix(ft.msg, fmt.Sprintf("still %d", calls)) {
		t.Fatalf("message %q does not end with the last detail (call %d)", ft.msg, calls)
	}

	ft = fakeTB{}
	n := 0
	WaitFor(&ft, time.Second, "three calls", func() (bool, string) { n++; return n == 3, "" })
	if ft.failed || n != 3 {
		t.Fatalf("a condition that holds: failed %t (%s) after %d calls", ft.failed, ft.msg, n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Poll(ctx, time.Second, 0, "nothing", func() (bool, string) { return false, "" })
	var we *WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "gave up (context canceled)") {
		t.Fatalf("Poll with a canceled context: %v", err)
	}
}

func TestBuilds_BuildsOnceOrTakesPrebuilt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	t.Setenv(BinDirEnv, "")
	var b Builds
	defer b.Close()
	const pkg = "github.com/cohortlabs/cohort/internal/proc/testdata/echoargs"
	bins, err := b.Build(context.Background(), pkg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(bins[0])
	if err != nil || filepath.Base(bins[0]) != "echoargs" {
		t.Fatalf("built %q: %v", bins[0], err)
	}
	if again := b.BuildT(t, pkg); again != bins[0] {
		t.Fatalf("second build gave %s, first %s", again, bins[0])
	}
	if st2, _ := os.Stat(bins[0]); !st2.ModTime().Equal(st.ModTime()) {
		t.Fatal("built again")
	}
	out, err := exec.Command(bins[0], "a", "b").Output()
	if err != nil || string(out) != "a\nb\n" {
		t.Fatalf("run: %q %v", out, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bins[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("binary left after Close: %v", err)
	}

	dir := t.TempDir()
	t.Setenv(BinDirEnv, dir)
	if _, err := b.Build(context.Background(), pkg); err == nil || !strings.Contains(err.Error(), BinDirEnv) {
		t.Fatalf("missing prebuilt binary: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "echoargs"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Build(context.Background(), pkg); err != nil || got[0] != filepath.Join(dir, "echoargs") {
		t.Fatalf("prebuilt: %v %v", got, err)
	}
}

func TestKill_OwnGroupKillsChildren(t *testing.T) {
	p := StartT(t, Spec{Path: "sh", Args: []string{"-c", "sleep 60 & echo child $!; wait"}, OwnGroup: true})
	var child int
	WaitFor(t, 5*time.Second, "the child's pid", func() (bool, string) {
		_, err := fmt.Sscanf(Tail(p.Log().String(), 1), "child %d", &child)
		return err == nil, p.Log().String()
	})
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 5*time.Second, "the child to die", func() (bool, string) {
		err := syscall.Kill(child, 0)
		s := procState(t, child)
		return errors.Is(err, syscall.ESRCH) || s == "Z", "state " + s
	})
}
