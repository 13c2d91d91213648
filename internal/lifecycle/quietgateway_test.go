package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/reconfhq/reconf/internal/gateway"
)

// quietGateway is a gateway on the valid configuration that logs
// nowhere, shut down when t ends, and its logger, for the restarters
// and hand-overs the tests build around it.
func quietGateway(t *testing.T) (*gateway.Gateway, *slog.Logger) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := gateway.New(context.Background(), writeFile(t, valid), gateway.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Shutdown(context.Background()) })
	return g, log
}
