package frontend

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestDecisionAfterRunsOnceTheRequestIsSent: the work a decision leaves
// for later (Decision.After) runs once per decision, after the request is
// written to its worker and before the answer: the worker holds its answer
// until the work has run, and fails the request if it never does.
func TestDecisionAfterRunsOnceTheRequestIsSent(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	gate := make(chan struct{})
	a.gate = gate
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	var runs atomic.Int32
	h.router.after = func() {
		if runs.Add(1) == 1 {
			close(gate)
		}
	}
	resp, body := h.do(t, "POST", "/v1/chat/completions", chatStreamBody)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("After ran %d times for one decision, want 1", n)
	}
}

// TestDecisionAfterRunsWhenNoWorkerAnswers: a request whose worker cannot
// be reached still runs each decision's After, once.
func TestDecisionAfterRunsWhenNoWorkerAnswers(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	wk := Worker{ID: "w-gone", Role: RoleAggregated, Model: testModel, URL: gone.URL, MaxModelLen: 4096}
	h := newHarness(t, Config{}, Deps{}, wk)
	var runs atomic.Int32
	h.router.after = func() { runs.Add(1) }
	resp, body := h.do(t, "POST", "/v1/chat/completions", chatStreamBody)
	if resp.StatusCode < 500 {
		t.Fatalf("status %d with no worker reachable: %s", resp.StatusCode, body)
	}
	picks := len(h.router.recorded())
	if picks == 0 || int(runs.Load()) != picks {
		t.Errorf("After ran %d times for %d decisions", runs.Load(), picks)
	}
}
