package bus

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Connect dials NATS at url (a comma-separated list of a cluster's nodes is
// fine) as the client called name. The connection reconnects forever with
// jittered backoff and buffers up to 8 MiB of publishes while disconnected, so
// a NATS restart shows up as an event gap (and a resync), not as a dead
// worker. The initial dial honours ctx and retries until it succeeds or ctx
// ends, except that a refused login fails at once: retrying cannot fix it.
// extra carries credentials and TLS (nats.UserInfo, nats.UserCredentials,
// nats.RootCAs, ...) and a worker's inbox prefix.
func Connect(ctx context.Context, url, name string, extra ...nats.Option) (*nats.Conn, error) {
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
	opts = append(opts, extra...)
	backoff := 100 * time.Millisecond
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			return nc, nil
		}
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
			return nil, fmt.Errorf("bus: connect to %s: %w (check the NATS credentials)", RedactURL(url), err)
		}
		var cve *tls.CertificateVerificationError
		if errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) || errors.As(err, &cve) {
			return nil, fmt.Errorf("bus: connect to %s: %w (the server and this process disagree on TLS: check --nats-ca)", RedactURL(url), err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: connect to %s: %w (last error: %w)", RedactURL(url), ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
