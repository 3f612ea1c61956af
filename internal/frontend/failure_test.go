package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

const streamBody = `{"model":"qwen3-0.6b","prompt":"hello there","stream":true}`

func TestRetryOnceBeforeFirstByte(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(fw *fakeWorker)
		kind   string
		stream bool
	}{
		{"connection refused", func(fw *fakeWorker) { fw.srv.Close() }, errKindUpstreamConn, true},
		{"5xx", func(fw *fakeWorker) { fw.setMode(mode500) }, errKindUpstreamStatus, false},
		{"timeout to headers", func(fw *fakeWorker) { fw.setMode(modeHangHeaders) }, errKindUpstreamConn, true},
		{"dropped before any body byte", func(fw *fakeWorker) { fw.setMode(modeHeadersThenDie) }, errKindUpstreamStream, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
			h := newHarness(t, Config{HeaderTimeout: 300 * time.Millisecond}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
			tc.break_(a)
			body := `{"model":"qwen3-0.6b","prompt":"hello there"}`
			if tc.stream {
				body = streamBody
			}
			resp, got := h.do(t, "POST", "/v1/completions", body)
			if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-b" {
				t.Fatalf("status %d worker %q: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), got)
			}
			if tc.stream && !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
				t.Errorf("stream does not end with [DONE]: %q", got)
			}
			picks := h.router.recorded()
			if len(picks) != 2 || !slices.Equal(picks[1].Candidates, []string{"w-b"}) {
				t.Errorf("router picks = %+v, want a second pick excluding w-a", picks)
			}
			if got := value(t, h.s.m.retries); got != 1 {
				t.Errorf("retries = %v, want 1", got)
			}
			if got := value(t, h.s.m.errors.WithLabelValues(tc.kind)); got != 1 {
				t.Errorf("errors{%s} = %v, want 1", tc.kind, got)
			}
		})
	}
}

func TestRetryOnlyOnce(t *testing.T) {
	a, b, c := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b"), newFakeWorker(t, "w-c")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated), c.worker(RoleAggregated))
	a.setMode(mode500)
	b.setMode(mode500)
	resp, body := h.do(t, "POST", "/v1/completions", streamBody)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status = %d, want 502", resp.StatusCode)
	}
	if e := decodeError(t, body); e.Type != openai.TypeServer || !strings.Contains(e.Message, "w-b") {
		t.Errorf("error = %+v", e)
	}
	if n := len(c.received()); n != 0 {
		t.Errorf("third worker got %d requests; retries must stop after one", n)
	}
}

func TestMidStreamFailureEndsWithErrorEvent(t *testing.T) {
	tests := []struct {
		name string
		mode string
		kind string
	}{
		{"connection dropped", modeDieMidStream, errKindUpstreamStream},
		{"worker stalls", modeStallMidStream, errKindUpstreamIdle},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
			h := newHarness(t, Config{IdleTimeout: 300 * time.Millisecond}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
			a.setMode(tc.mode)
			resp, body := h.do(t, "POST", "/v1/chat/completions", `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"hi"}],"stream":true}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			evs := sseEvents(t, body)
			if len(evs) < 4 {
				t.Fatalf("events = %q", evs)
			}
			if !strings.Contains(evs[1], "tok0") || !strings.Contains(evs[2], "tok1") {
				t.Errorf("tokens before the failure were not relayed: %q", evs)
			}
			var e openai.ErrorResponse
			if err := json.Unmarshal([]byte(evs[len(evs)-2]), &e); err != nil || e.Error.Message == "" || e.Error.Code != 502 {
				t.Errorf("second-to-last event %q is not an error (%v)", evs[len(evs)-2], err)
			}
			if evs[len(evs)-1] != "[DONE]" {
				t.Errorf("last event = %q, want [DONE]", evs[len(evs)-1])
			}
			if n := len(b.received()); n != 0 {
				t.Errorf("mid-stream failure was retried on w-b")
			}
			if got := value(t, h.s.m.errors.WithLabelValues(tc.kind)); got != 1 {
				t.Errorf("errors{%s} = %v, want 1", tc.kind, got)
			}
		})
	}
}

func TestClientDisconnectCancelsWorker(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	a.setMode(modeStallMidStream)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/completions", strings.NewReader(streamBody))
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Read until the first token has arrived, then hang up.
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), "tok0") {
	}
	cancel()
	select {
	case <-a.canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("worker request was not cancelled after the client went away")
	}
	waitFor(t, "client_canceled counted", func() bool {
		return value(t, h.s.m.errors.WithLabelValues(errKindClientCanceled)) == 1
	})
}

func TestNonStreamingWorkerFailureIs502(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	h := newHarness(t, Config{HeaderTimeout: 300 * time.Millisecond}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
	a.setMode(mode500)
	b.setMode(modeHangHeaders)
	resp, body := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"}`)
	if e := decodeError(t, body); resp.StatusCode != 502 || e.Code != 502 || e.Type != openai.TypeServer {
		t.Errorf("status %d error %+v", resp.StatusCode, e)
	}
}

func TestOverallRequestTimeout(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	// Idle and header timeouts are long; only the overall deadline can end this.
	h := newHarness(t, Config{RequestTimeout: 400 * time.Millisecond}, Deps{}, a.worker(RoleAggregated))
	a.setMode(modeStallMidStream)
	resp, body := h.do(t, "POST", "/v1/completions", streamBody)
	evs := sseEvents(t, body)
	if resp.StatusCode != 200 || len(evs) < 2 || evs[len(evs)-1] != "[DONE]" || !strings.Contains(evs[len(evs)-2], `"error"`) {
		t.Errorf("status %d events %q", resp.StatusCode, evs)
	}
}

// TestEventsAreNotHeldBack checks that each event reaches the client while
// the worker is still working on the next one.
func TestEventsAreNotHeldBack(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	a.setMode(modeStallMidStream) // sends tok0 and tok1, then waits for cancellation
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/completions", strings.NewReader(streamBody))
	got := make(chan string, 1)
	go func() {
		defer close(got)
		resp, err := h.srv.Client().Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "tok1") {
				got <- sc.Text()
				return
			}
		}
	}()
	select {
	case _, ok := <-got:
		if !ok {
			t.Fatal("stream failed or ended without tok1")
		}
	case <-time.After(10 * time.Second): // the idle timeout is 30 s: a held-back event would show here
		t.Fatal("tok1 did not reach the client while the worker was still streaming")
	}
}
