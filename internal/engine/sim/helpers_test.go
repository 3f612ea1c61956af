package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
)

// eventLog collects published steps in-process.
type eventLog struct {
	mu    sync.Mutex
	steps [][]kvevents.Event
}

func (l *eventLog) PublishStep(ev []kvevents.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = append(l.steps, ev)
}

func (l *eventLog) all() [][]kvevents.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]kvevents.Event(nil), l.steps...)
}

// startWorker builds a worker, runs its scheduler and serves it; everything
// stops at cleanup.
func startWorker(t testing.TB, cfg Config) (*Worker, *httptest.Server) {
	t.Helper()
	if cfg.Speedup == 0 {
		cfg.Speedup = 1000
	}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Close()
	})
	return w, srv
}

// post sends a JSON body and returns the status, headers and body.
func post(t testing.TB, url, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// essay is a deterministic prompt of n words.
func essay(n int, seed int) string {
	words := strings.Fields("switchyard routes requests to workers that already hold the prefix of the prompt in their cache and moves blocks across the link only when that is faster than recomputing them locally on the decode worker")
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[(i*7+seed*13+i/len(words))%len(words)])
	}
	return b.String()
}
