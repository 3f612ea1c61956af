package cli

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// readyWriter collects output and calls onReady once it holds want.
type readyWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	want    string
	onReady func()
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if w.onReady != nil && strings.Contains(w.buf.String(), w.want) {
		w.onReady()
		w.onReady = nil
	}
	return n, err
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// The banner describes each worker as the frontend sees it: a bridged
// engine's events are on (its bridge registered it so), although the
// simulated engine behind the bridge publishes nothing on NATS itself.
func TestUpBannerBridgedWorkersHaveEvents(t *testing.T) {
	t.Setenv(envAPIKey, "")
	t.Setenv(envAdminKey, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stdout := &readyWriter{want: "Switchyard is ready", onReady: cancel}
	var stderr bytes.Buffer
	code := Main(ctx, []string{"up", "--engine-wire", "vllm", "--workers", "2", "--http-addr", "127.0.0.1:0"}, strings.NewReader(""), stdout, &stderr)
	if code != ExitOK || !strings.Contains(stdout.String(), "Switchyard is ready") {
		t.Fatalf("up exited %d before ready\nstdout %s\nstderr %s", code, stdout.String(), stderr.String())
	}
	banner := stderr.String()
	if strings.Contains(banner, "KV events OFF") {
		t.Errorf("banner says KV events OFF for bridged workers with events on:\n%s", banner)
	}
	if n := strings.Count(banner, "(bridged)"); n != 2 {
		t.Errorf("banner names %d bridged workers, want 2:\n%s", n, banner)
	}
}
