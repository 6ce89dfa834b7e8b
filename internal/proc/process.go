package proc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrRunning is returned by Wait when its context ends before the process
// exits.
var ErrRunning = errors.New("process still running")

// killWait bounds the wait after SIGKILL: a process that outlives it is
// stuck in the kernel, and the caller should hear of it rather than hang.
const killWait = 10 * time.Second

// waitDelay bounds how long a process's exit waits for its output pipe to
// close: a child it left behind (a script's) may hold the pipe open.
const waitDelay = 2 * time.Second

// Spec says how to start a process.
type Spec struct {
	// Name labels the process in its log and in errors, e.g. "n1"
	// (default: the program's file name).
	Name string
	// Path is the program; Args its arguments.
	Path string
	Args []string
	// Wrapper is a command prefix the program runs under, e.g.
	// {"ip", "netns", "exec", "cch1-n1"}. It must exec the program rather
	// than fork it, so that signals reach the program itself.
	Wrapper []string
	// Env is the environment; nil inherits this process's.
	Env []string
	// Dir is the working directory; "" is this process's.
	Dir string
	// Log receives stdout and stderr, after a header line per start and
	// before a line on exit; nil gives the process a NewLog(DefaultKeep).
	Log *Log
	// OwnGroup starts the process in a process group of its own: a Ctrl-C
	// to the caller does not reach it, and Kill kills the whole group (a
	// script and the processes it started).
	OwnGroup bool
	// Logger gets a debug line per start and exit; nil discards.
	Logger *slog.Logger
}

func (s Spec) name() string {
	if s.Name != "" {
		return s.Name
	}
	return filepath.Base(s.Path)
}

// Process is a started process. It is killed with SIGKILL when the process
// that started it dies (Linux parent-death signal), so a crashed test or
// tool leaves none behind.
type Process struct {
	name     string
	ownGroup bool
	cmd      *exec.Cmd
	log      *Log
	done     chan struct{}
	err      error // exit status; set before done is closed

	mu     sync.Mutex
	paused bool
}

// Start starts a process as spec says. It returns once the process runs.
func Start(spec Spec) (*Process, error) {
	if spec.Path == "" {
		return nil, errors.New("proc: Spec.Path is required")
	}
	if spec.Log == nil {
		spec.Log = NewLog(DefaultKeep)
	}
	if spec.Logger == nil {
		spec.Logger = slog.New(slog.DiscardHandler)
	}
	argv := append(append(append([]string(nil), spec.Wrapper...), spec.Path), spec.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = spec.Env, spec.Dir
	cmd.Stdout, cmd.Stderr = spec.Log, spec.Log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: spec.OwnGroup, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = waitDelay
	p := &Process{name: spec.name(), ownGroup: spec.OwnGroup, cmd: cmd, log: spec.Log, done: make(chan struct{})}
	n := spec.Log.started()
	spec.Log.notef("%s: start #%d at %s: %s", p.name, n, time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))
	if err := cmd.Start(); err != nil {
		spec.Log.notef("%s: start failed: %v", p.name, err)
		return nil, fmt.Errorf("start %s (%s): %w", p.name, argv[0], err)
	}
	spec.Logger.Debug("process started", "name", p.name, "pid", cmd.Process.Pid)
	go func() {
		err := cmd.Wait()
		status := "exit status 0"
		if err != nil {
			status = err.Error()
			err = fmt.Errorf("%s (pid %d): %w", p.name, cmd.Process.Pid, err)
		}
		spec.Log.notef("%s (pid %d) exited: %s", p.name, cmd.Process.Pid, status)
		spec.Logger.Debug("process exited", "name", p.name, "pid", cmd.Process.Pid, "status", status)
		p.err = err
		close(p.done)
	}()
	return p, nil
}

// Name is the process's label.
func (p *Process) Name() string { return p.name }

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Log is where the process's output goes.
func (p *Process) Log() *Log { return p.log }

// Done is closed once the process has exited and its output is in its Log.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit status once it exited: nil for exit status 0,
// else an error wrapping *exec.ExitError. Nil while it runs.
func (p *Process) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Signal sends sig to the process (not its group). SIGSTOP and SIGCONT
// also mark it paused or not. An exited process gives an error wrapping
// os.ErrProcessDone.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// Pause stops the process with SIGSTOP.
func (p *Process) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (p *Process) Resume() error { return p.Signal(syscall.SIGCONT) }

// Paused reports whether the process is stopped by Pause and still there.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused && !p.Exited()
}

// Kill sends SIGKILL (to the whole group with OwnGroup, even when the
// process itself has exited) and waits for the process to exit. Killing an
// exited process is a no-op.
func (p *Process) Kill() error {
	if p.ownGroup {
		if err := syscall.Kill(-p.Pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill -9 the group of %s: %w", p.name, err)
		}
	} else if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill -9 %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("%s (pid %d) still there %s after SIGKILL", p.name, p.Pid(), killWait)
	}
}

// Stop asks the process to stop with SIGTERM (continuing it first if it is
// paused, so that the signal is handled) and waits for it to exit; when ctx
// ends first, it kills the process and says so. It returns the exit status
// as Err does.
func (p *Process) Stop(ctx context.Context) error {
	if err := p.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	if p.Paused() {
		if err := p.Resume(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return err
		}
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		if err := p.Kill(); err != nil {
			return err
		}
		return fmt.Errorf("%s (pid %d) did not exit after SIGTERM: %w; killed", p.name, p.Pid(), ctx.Err())
	}
}

// Wait waits for the process to exit on its own and returns its exit status
// as Err does; when ctx ends first it returns an error wrapping ErrRunning
// and ctx's error.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return fmt.Errorf("%s (pid %d): %w: %w", p.name, p.Pid(), ErrRunning, ctx.Err())
	}
}
