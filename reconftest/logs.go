package reconftest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// recordedLogs keeps the runtime's log records that mean a consumer bug: a
// panic in Commit or Abort, a value whose Close failed, a configuration
// modified in place. Attempt records (a refusal the kit caused) are not
// kept.
type recordedLogs struct {
	mu   sync.Mutex
	msgs []string
}

var _ slog.Handler = (*recordedLogs)(nil)

func (l *recordedLogs) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }

func (l *recordedLogs) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelError && r.Message != "reconf: closing a retired consumer value failed" {
		return nil
	}
	var b []byte
	b = fmt.Appendf(b, "%q", r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b = fmt.Appendf(b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.msgs = append(l.msgs, string(b))
	l.mu.Unlock()
	return nil
}

func (l *recordedLogs) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordedLogs) WithGroup(string) slog.Handler      { return l }

func (l *recordedLogs) drain() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.msgs
	l.msgs = nil
	return m
}
