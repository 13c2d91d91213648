package reconf

import (
	"io"
	"log/slog"

	"github.com/reconfhq/reconf/internal/testkit"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// captureLogger records every log line for the secret canary.
type captureLogger struct{ testkit.Buffer }

func (c *captureLogger) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
