package zlog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"go.uber.org/zap"
)

func TestRoutesToSlogAboveLevel(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), "etcd", slog.LevelWarn)
	l.Info("dropped")
	l.Named("raft").With(zap.String("member", "m1")).Warn("slow apply", zap.Int("took_ms", 120))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("want exactly one JSON line, got %q: %v", buf.String(), err)
	}
	for k, want := range map[string]any{"msg": "slow apply", "level": "WARN", "component": "etcd", "logger": "raft", "member": "m1", "took_ms": 120.0} {
		if rec[k] != want {
			t.Errorf("%s: got %v, want %v", k, rec[k], want)
		}
	}
	if New(nil, "x", slog.LevelInfo).Core().Enabled(zap.ErrorLevel) {
		t.Error("a nil slog logger does not discard")
	}
}
