package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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

// errorsTotal sums switchyard_errors_total over every kind.
func errorsTotal(t testing.TB, h *harness) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "switchyard_errors_total" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// TestEachFailureCountedOnce: two failed attempts are two errors, not three
// (the 502 the client gets is the second failure, not a third).
func TestEachFailureCountedOnce(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
	a.setMode(mode500)
	b.setMode(mode500)
	resp, body := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"}`)
	if e := decodeError(t, body); resp.StatusCode != 502 || e.Code != 502 || e.Type != openai.TypeServer {
		t.Errorf("status %d error %+v", resp.StatusCode, e)
	}
	if got := value(t, h.s.m.errors.WithLabelValues(errKindUpstreamStatus)); got != 2 {
		t.Errorf("errors{upstream_status} = %v, want 2", got)
	}
	if got := errorsTotal(t, h); got != 2 {
		t.Errorf("errors total = %v, want 2", got)
	}
}

// TestTimeoutIsNotRetried: a worker that timed out may still be generating;
// sending the request elsewhere would run it twice. The timeout is one
// error of kind timeout and a 504.
func TestTimeoutIsNotRetried(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		body string
	}{
		{"streaming, header timeout", Config{HeaderTimeout: 300 * time.Millisecond}, streamBody},
		{"non-streaming, request timeout", Config{HeaderTimeout: 100 * time.Millisecond, RequestTimeout: 400 * time.Millisecond},
			`{"model":"qwen3-0.6b","prompt":"hello there"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
			h := newHarness(t, tc.cfg, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
			a.setMode(modeHangHeaders)
			resp, body := h.do(t, "POST", "/v1/completions", tc.body)
			if e := decodeError(t, body); resp.StatusCode != http.StatusGatewayTimeout || e.Type != openai.TypeServer || !strings.Contains(e.Message, "w-a") {
				t.Errorf("status %d error %+v, want 504 naming w-a", resp.StatusCode, e)
			}
			if n := len(b.received()); n != 0 {
				t.Errorf("timed-out request was retried on w-b (%d requests)", n)
			}
			if got := value(t, h.s.m.retries); got != 0 {
				t.Errorf("retries = %v, want 0", got)
			}
			if got := value(t, h.s.m.errors.WithLabelValues(errKindTimeout)); got != 1 {
				t.Errorf("errors{timeout} = %v, want 1", got)
			}
			if got := errorsTotal(t, h); got != 1 {
				t.Errorf("errors total = %v, want 1", got)
			}
		})
	}
}

// TestNonStreamingOutlivesHeaderTimeout: a non-streaming worker sends its
// headers only when generation is done, so HeaderTimeout must not cut it.
func TestNonStreamingOutlivesHeaderTimeout(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	h := newHarness(t, Config{HeaderTimeout: 100 * time.Millisecond}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
	a.setMode(modeSlow) // answers after 600 ms, six header timeouts
	resp, body := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"}`)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-a" {
		t.Fatalf("status %d worker %q: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), body)
	}
	if n := len(b.received()); n != 0 {
		t.Errorf("w-b got %d requests, want 0", n)
	}
	if got := errorsTotal(t, h); got != 0 {
		t.Errorf("errors total = %v, want 0", got)
	}
}

// TestWorker4xxRelayedAndCounted: a worker's 4xx reaches the client as it
// is, is not retried and counts as worker_4xx.
func TestWorker4xxRelayedAndCounted(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
	a.setMode(mode400)
	resp, body := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"}`)
	e := decodeError(t, body)
	if resp.StatusCode != 400 || e.Message != "fake worker: prompt too long" || e.Param == nil || *e.Param != "prompt" {
		t.Errorf("status %d error %+v, want the worker's 400", resp.StatusCode, e)
	}
	if n := len(b.received()); n != 0 {
		t.Errorf("4xx was retried on w-b")
	}
	if got := value(t, h.s.m.errors.WithLabelValues(errKindWorker4xx)); got != 1 {
		t.Errorf("errors{worker_4xx} = %v, want 1", got)
	}
	if got := errorsTotal(t, h); got != 1 {
		t.Errorf("errors total = %v, want 1", got)
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

// TestFrozenWorkerSuspected: a worker that takes connections but answers
// nothing, not even its /health, is given up on after SuspectAfter plus
// the check, not the (long) header timeout: the request is retried on
// another worker and the frozen one ejected, so the next request goes
// elsewhere at once.
func TestFrozenWorkerSuspected(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			b := newFakeWorker(t, "w-b")
			h := newHarness(t, Config{HeaderTimeout: time.Minute, SuspectAfter: 100 * time.Millisecond, SuspectCheckTimeout: 200 * time.Millisecond},
				Deps{}, frozenWorker(t, "w-frozen"), b.worker(RoleAggregated))
			h.router.prefer = []string{"w-frozen"} // the router keeps choosing it while it may
			body := `{"model":"qwen3-0.6b","prompt":"hello there"}`
			if stream {
				body = streamBody
			}
			resp, got := h.do(t, "POST", "/v1/completions", body)
			if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-b" {
				t.Fatalf("status %d worker %q: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), got)
			}
			if !h.s.ejected("w-frozen") {
				t.Errorf("frozen worker not ejected after its failed health check")
			}
			if got := value(t, h.s.m.retries); got != 1 {
				t.Errorf("retries = %v, want 1", got)
			}
			resp, got = h.do(t, "POST", "/v1/completions", body)
			if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-b" {
				t.Fatalf("next request: status %d worker %q: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), got)
			}
			if got := value(t, h.s.m.retries); got != 1 {
				t.Errorf("next request retried: retries = %v, want still 1 (sent to w-b at once)", got)
			}
		})
	}
}

// TestSlowWorkerNotSuspected: a worker slower than SuspectAfter whose
// /health answers keeps its request.
func TestSlowWorkerNotSuspected(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	a.setMode(modeSlow)
	h := newHarness(t, Config{SuspectAfter: 50 * time.Millisecond, SuspectCheckTimeout: time.Second}, Deps{}, a.worker(RoleAggregated))
	resp, got := h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"hello there"}`)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-a" {
		t.Fatalf("status %d worker %q: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), got)
	}
	if h.s.ejected("w-a") {
		t.Errorf("a slow worker that answers its health check was ejected")
	}
}
