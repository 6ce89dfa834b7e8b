package proc

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
)

// DefaultKeep is how much output a Log of a test's process keeps in memory:
// more than a cohortd writes at info level in any test, so that assertions
// on its log see all of it, and a bound if something floods.
const DefaultKeep = 8 << 20

// Log collects the output of a process, or of the successive processes of
// one node across restarts: the most recent output in memory (for
// assertions and failure messages) and, when opened with a path,
// everything appended to that file. Safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	keep    int
	buf     []byte
	dropped int64
	path    string
	file    *os.File
	fileErr error
	starts  int
}

// NewLog keeps the last keep bytes of output in memory (none when keep is
// 0).
func NewLog(keep int) *Log { return &Log{keep: keep} }

// OpenLog appends all output to the file at path (created if missing) and
// keeps the last keep bytes in memory too. Close closes the file.
func OpenLog(path string, keep int) (*Log, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	return &Log{keep: keep, path: path, file: f}, nil
}

// Write never fails: a process must not die of a broken pipe because its
// log file could not be written. The first file error is kept for Close.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil && l.fileErr == nil {
		_, l.fileErr = l.file.Write(p)
	}
	if l.keep <= 0 {
		return len(p), nil
	}
	l.buf = append(l.buf, p...)
	// Trimmed only past twice the limit, so that appending stays amortised
	// O(1); the cut falls after a newline, so that lines stay whole.
	if len(l.buf) > 2*l.keep {
		cut := len(l.buf) - l.keep
		if i := bytes.IndexByte(l.buf[cut:], '\n'); i >= 0 {
			cut += i + 1
		}
		l.dropped += int64(cut)
		l.buf = append([]byte(nil), l.buf[cut:]...)
	}
	return len(p), nil
}

// notef writes one harness line (start, exit) into the log.
func (l *Log) notef(format string, args ...any) {
	_, _ = fmt.Fprintf(l, "=== "+format+"\n", args...)
}

// started counts a start of a process into this log.
func (l *Log) started() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts++
	return l.starts
}

// String is the output kept in memory: at least the last keep bytes, in
// whole lines, after a marker line if older output was dropped.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped > 0 {
		return fmt.Sprintf("=== %d earlier bytes dropped\n%s", l.dropped, l.buf)
	}
	return string(l.buf)
}

// Tail is the last lines of String.
func (l *Log) Tail(lines int) string { return Tail(l.String(), lines) }

// Path is the log file's path, or "" for a log in memory only.
func (l *Log) Path() string { return l.path }

// Close closes the log file, reporting the first write error; the memory
// part stays readable and writable. Safe to call more than once.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file == nil {
		return nil
	}
	err := l.file.Close()
	if l.fileErr != nil {
		err = fmt.Errorf("write log %s: %w", l.file.Name(), l.fileErr)
	}
	l.file = nil
	return err
}

// Tail is the last lines of s (all of it when lines <= 0), without a
// trailing newline.
func Tail(s string, lines int) string {
	s = strings.TrimSuffix(s, "\n")
	if lines <= 0 {
		return s
	}
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
