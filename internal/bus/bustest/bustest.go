// Package bustest is the test kit for code on the bus: a real embedded NATS
// server per test and connections to it, cleaned up with the test. It is
// for tests only.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// Server starts an embedded NATS server for one test, on a free loopback
// port. An empty cfg.StoreDir becomes a directory of the test's.
func Server(t testing.TB, cfg bus.EmbeddedConfig) *bus.Embedded {
	t.Helper()
	if cfg.StoreDir == "" && !cfg.DisableJetStream {
		cfg.StoreDir = t.TempDir()
	}
	e, err := bus.StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// Connect dials url, failing the test after 10 s; the connection closes
// at cleanup.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := bus.Connect(ctx, url, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
