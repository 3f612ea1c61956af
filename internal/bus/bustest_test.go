package bus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// startServer runs an embedded NATS with JetStream for one test.
func startServer(t testing.TB) *Embedded {
	t.Helper()
	e, err := StartEmbedded(EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := Connect(ctx, url, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not true after %v: %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
