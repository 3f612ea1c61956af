package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// TestGuardBus: an external server that admits anyone is refused with
// advice, unless --nats-insecure; one that requires logins is accepted.
func TestGuardBus(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	open, err := bus.StartEmbedded(bus.EmbeddedConfig{DisableJetStream: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Close() })
	locked, err := bus.StartEmbedded(bus.EmbeddedConfig{DisableJetStream: true, Auth: &bus.EmbeddedAuth{Secret: secret}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { locked.Close() })
	dial := func(url string, opts ...nats.Option) *nats.Conn {
		nc, err := bus.Connect(t.Context(), url, t.Name(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	anon := dial(open.ClientURL())
	frontend := dial(locked.ClientURL(), nats.UserInfo(bus.UserFrontend, bus.Password(secret, bus.UserFrontend)))

	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&syncWriter{w: &out}, nil))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	b := busFlags{nats: open.ClientURL()}
	if err := b.guardBus(ctx, anon, log); err == nil || !strings.Contains(err.Error(), "--nats-insecure") || !strings.Contains(err.Error(), "without credentials") {
		t.Errorf("unauthenticated server: %v, want a refusal naming --nats-insecure", err)
	}
	b.nats = locked.ClientURL()
	if err := b.guardBus(ctx, frontend, log); err != nil {
		t.Errorf("server with logins: %v", err)
	}
	b = busFlags{nats: open.ClientURL(), insecure: true}
	if err := b.guardBus(ctx, anon, log); err != nil {
		t.Errorf("--nats-insecure: %v", err)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.w.String(), sub)
}

// TestWarnEveryMinute: running on an insecure bus warns at once and then
// every minute, and stops when the process does.
func TestWarnEveryMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &syncWriter{w: &bytes.Buffer{}}
		log := slog.New(slog.NewTextHandler(w, nil))
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			warnEvery(ctx, log, insecureWarnEvery, "insecure bus")
		}()
		synctest.Wait()
		if n := w.count("level=WARN msg=\"insecure bus\""); n != 1 {
			t.Errorf("at start: %d warnings, want 1", n)
		}
		time.Sleep(3*time.Minute + time.Second)
		synctest.Wait()
		if n := w.count("level=WARN"); n != 4 {
			t.Errorf("after 3 minutes: %d warnings, want 4 (at start and each minute)", n)
		}
		cancel()
		<-done
		time.Sleep(5 * time.Minute)
		if n := w.count("level=WARN"); n != 4 {
			t.Errorf("after stopping: %d warnings, want still 4", n)
		}
	})
}
