package raftnode

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// slogLevelTrace is below slog's Debug: raft's Trace lines are only
// interesting when debugging raft itself.
const slogLevelTrace = slog.LevelDebug - 4

// hclogAdapter routes hashicorp/raft's hclog output into slog, so that
// cohortd has one log stream with one format. Levels are mapped one to one
// (Trace below Debug); key/value pairs become slog attributes; the hclog
// name becomes the "logger" attribute.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

// HCLogger returns an hclog.Logger (what hashicorp libraries log to) named
// name that writes to l, for libraries used beside raft (raft-autopilot).
func HCLogger(l *slog.Logger, name string) hclog.Logger { return newHCLogAdapter(l, name) }

func newHCLogAdapter(l *slog.Logger, name string) *hclogAdapter {
	return &hclogAdapter{l: l.With("logger", name), name: name}
}

func toSlogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slogLevelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	lvl := toSlogLevel(level)
	ctx := context.Background()
	if !a.l.Enabled(ctx, lvl) {
		return
	}
	a.l.Log(ctx, lvl, msg, normaliseArgs(args)...)
}

// normaliseArgs turns hclog's loose key/value list into slog arguments:
// an odd trailing value gets hclog's "EXTRA_VALUE_AT_END" key, and
// non-string keys are formatted, so that slog never sees "!BADKEY".
func normaliseArgs(args []any) []any {
	if len(args) == 0 {
		return nil
	}
	out := make([]any, 0, len(args)+1)
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			out = append(out, "EXTRA_VALUE_AT_END", args[i])
			break
		}
		key, ok := args[i].(string)
		if !ok {
			key = strings.TrimSpace(slog.AnyValue(args[i]).String())
		}
		v := args[i+1]
		// raft passes hclog.Fmt values for lazily formatted fields.
		if f, ok := v.(hclog.Format); ok && len(f) > 0 {
			if format, ok := f[0].(string); ok {
				v = fmt.Sprintf(format, f[1:]...)
			}
		}
		out = append(out, key, v)
	}
	return out
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(level hclog.Level) bool {
	return a.l.Enabled(context.Background(), toSlogLevel(level))
}

func (a *hclogAdapter) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogAdapter) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogAdapter) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogAdapter) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogAdapter) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	implied := append(append([]any(nil), a.implied...), args...)
	return &hclogAdapter{l: a.l.With(normaliseArgs(args)...), name: a.name, implied: implied}
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	full := name
	if a.name != "" {
		full = a.name + "." + name
	}
	return a.ResetNamed(full)
}

// ResetNamed keeps the implied arguments but replaces the name. slog has no
// way to drop an attribute already attached, so the "logger" attribute is
// re-added and the later one wins in most handlers' output.
func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{l: a.l.With("logger", name), name: name, implied: a.implied}
}

// SetLevel is ignored: the level is the slog handler's, set once by cohortd.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if a.enabled(l) {
			return l
		}
	}
	return hclog.Off
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return &hclogWriter{a: a, level: level}
}

// hclogWriter turns lines written by a standard *log.Logger (raft's
// transport uses one) into log events at a fixed level.
type hclogWriter struct {
	a     *hclogAdapter
	level hclog.Level
}

func (w *hclogWriter) Write(p []byte) (int, error) {
	msg := strings.TrimRight(string(p), "\n")
	w.a.Log(w.level, msg)
	return len(p), nil
}
