package frontend

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// TestFinishedBeforeClientSeesDone is why preflight's routing check once
// scored 11/12 on an idle deployment: its client sends the next request the
// moment it reads [DONE]. When the frontend marked the request finished
// only on returning, after [DONE] was written, the next request could find
// the previous one still counted on its worker (a full prompt's blocks of
// load) and the kv policy sent it to the other, cold worker. Finished must
// happen before the client can read [DONE], every time.
func TestFinishedBeforeClientSeesDone(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	inf := &fakeInFlight{}
	h := newHarness(t, Config{}, Deps{InFlight: inf}, a.worker(RoleAggregated))
	for i := range 50 {
		resp, err := http.Post(h.srv.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"qwen3-0.6b","prompt":"x","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		r := openai.NewSSEReader(resp.Body)
		for {
			_, err := r.Next()
			if errors.Is(err, openai.ErrStreamDone) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// Not reading to EOF: the handler may not have returned yet.
		if got := inf.recorded(); slices.Index(got, "end w-a") < 0 || strings.Count(strings.Join(got, ","), "end w-a") != i+1 {
			t.Fatalf("request %d: client saw [DONE] before the frontend recorded the finish: %q", i, got)
		}
		resp.Body.Close()
	}
}

// TestWorkerRequestsByOutcome: /metrics counts every attempt on a worker by
// worker and outcome, so an operator sees which worker fails and how.
func TestWorkerRequestsByOutcome(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
	h.router.prefer = []string{"w-a"}
	const body = `{"model":"qwen3-0.6b","prompt":"x","stream":true}`
	h.do(t, "POST", "/v1/completions", body) // w-a ok
	h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"}`)
	a.setMode(mode400)
	h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"}`) // w-a rejected
	a.setMode(mode500)
	h.do(t, "POST", "/v1/completions", body) // w-a error, retried on w-b: ok
	want := map[[2]string]float64{
		{"w-a", outcomeOK}: 2, {"w-a", outcomeRejected}: 1, {"w-a", outcomeError}: 1,
		{"w-b", outcomeOK}: 1, {"w-b", outcomeError}: 0, {"w-a", outcomeTimeout}: 0,
	}
	for k, v := range want {
		if got := value(t, h.s.m.workerRequests.WithLabelValues(k[0], k[1])); got != v {
			t.Errorf("switchyard_worker_requests_total{worker=%q,outcome=%q} = %v, want %v", k[0], k[1], got, v)
		}
	}
	_, m := h.do(t, "GET", "/metrics", "")
	if !strings.Contains(string(m), `switchyard_worker_requests_total{outcome="rejected",worker="w-a"} 1`) {
		t.Errorf("/metrics lacks the per-worker counter:\n%s", m)
	}
}
