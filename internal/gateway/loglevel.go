package gateway

import (
	"context"
	"log/slog"

	"github.com/reconfhq/reconf"
)

// levelConsumer makes logging.level live: each generation's level is set
// on the service logger's LevelVar when the generation commits, so a
// reload raises or lowers it with no restart. A level that does not parse
// cannot reach here (validation allows debug, info, warn, error only).
func levelConsumer(level *slog.LevelVar) reconf.Consumer[Config] {
	return reconf.ConsumerFunc[Config](func(_ context.Context, _, next *Config) (reconf.Prepared, error) {
		var l slog.Level
		if err := l.UnmarshalText([]byte(next.Logging.Level)); err != nil {
			return nil, err
		}
		return &reconf.Staged{OnCommit: func() { level.Set(l) }}, nil
	})
}
