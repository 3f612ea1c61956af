package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Connect dials NATS at url (a comma-separated list of a cluster's nodes is
// fine) as the client called name. The connection reconnects forever with
// jittered backoff and buffers up to 8 MiB of publishes while disconnected, so
// a NATS restart shows up as an event gap (and a resync), not as a dead
// worker. The initial dial honours ctx and retries until it succeeds or ctx
// ends.
func Connect(ctx context.Context, url, name string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.ReconnectBufSize(8 << 20),
		nats.Timeout(2 * time.Second),
		nats.PingInterval(5 * time.Second),
		nats.MaxPingsOutstanding(3),
	}
	backoff := 100 * time.Millisecond
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			return nc, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: connect to %s: %w (last error: %w)", url, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
