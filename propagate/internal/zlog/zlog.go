// Package zlog routes etcd's zap logs to a *slog.Logger.
//
// etcd's server and client log through zap. New returns a *zap.Logger
// whose only core writes each entry as one slog record, so a service keeps
// one log stream and one level policy.
package zlog

import (
	"context"
	"log/slog"
	"slices"
	"sort"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New returns a zap logger that writes entries at or above min to l, with
// the attribute component=name. A nil l discards everything.
func New(l *slog.Logger, name string, min slog.Level) *zap.Logger {
	return NewDemoting(l, name, min, nil)
}

// NewDemoting is New, except that an entry for which demote returns true
// is logged at debug level whatever its own level (for the noise a server
// logs as errors while it shuts down on purpose).
func NewDemoting(l *slog.Logger, name string, min slog.Level, demote func(msg string) bool) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return zap.New(&core{l: l.With(slog.String("component", name)), min: min, demote: demote})
}

type core struct {
	l      *slog.Logger
	min    slog.Level
	demote func(string) bool
	fields []zapcore.Field
}

func (c *core) levelOf(e zapcore.Entry) slog.Level {
	if c.demote != nil && c.demote(e.Message) {
		return slog.LevelDebug
	}
	return level(e.Level)
}

func (c *core) enabled(lv slog.Level) bool {
	return lv >= c.min && c.l.Enabled(context.Background(), lv)
}

func level(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (c *core) Enabled(l zapcore.Level) bool {
	// A demoted entry may still pass at debug level; Check decides.
	return c.enabled(level(l)) || (c.demote != nil && c.enabled(slog.LevelDebug))
}

func (c *core) With(fs []zapcore.Field) zapcore.Core {
	cp := *c
	cp.fields = append(slices.Clip(c.fields), fs...)
	return &cp
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.enabled(c.levelOf(e)) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	c.l.LogAttrs(context.Background(), c.levelOf(e), e.Message, attrs...)
	return nil
}

func (c *core) Sync() error { return nil }
