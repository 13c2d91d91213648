package gateway

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
)

// TestLogLevelIsLive raises logging.level from warn to debug with a reload
// and back, with no restart: the service logger follows each generation.
func TestLogLevelIsLive(t *testing.T) {
	out := &logBuffer{}
	warn := strings.Replace(baseConfig, "level: debug", "level: warn", 1)
	tg := startGateway(t, warn, WithLogger(nil), WithLogOutput(out))
	ctx := context.Background()
	if tg.Logger().Enabled(ctx, slog.LevelInfo) {
		t.Fatalf("info is enabled at level warn")
	}
	if res := tg.reload(baseConfig); res.Outcome != reconf.Published || !strings.Contains(strings.Join(res.ChangedFields, ","), "logging.level") {
		t.Fatalf("raising the level: %s %v %s", res.Outcome, res.ChangedFields, res.Message)
	}
	if !tg.Logger().Enabled(ctx, slog.LevelDebug) {
		t.Errorf("debug is not enabled after the reload to debug")
	}
	tg.Logger().Debug("a debug line after the reload")
	if !strings.Contains(out.String(), "a debug line after the reload") {
		t.Errorf("the debug line was not written:\n%s", out.String())
	}
	if res := tg.reload(strings.Replace(baseConfig, "level: debug", "level: error", 1)); res.Outcome != reconf.Published {
		t.Fatalf("lowering the level: %s", res.Outcome)
	}
	if tg.Logger().Enabled(ctx, slog.LevelWarn) {
		t.Errorf("warn is still enabled at level error")
	}
}
