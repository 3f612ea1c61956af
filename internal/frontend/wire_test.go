package frontend

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/router"
)

func TestContentPartsAccepted(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	resp, body := h.do(t, "POST", "/v1/chat/completions",
		`{"model":"qwen3-0.6b","messages":[{"role":"user","content":[{"type":"text","text":"hello"},{"type":"text","text":"there"}]}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if n := len(a.received()); n != 1 {
		t.Errorf("worker got %d requests, want 1", n)
	}
	// Tokenized from the joined text: the same block hashes as the string form.
	h2 := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	h2.do(t, "POST", "/v1/chat/completions", `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"hello\nthere"}]}`)
	p1, p2 := h.router.recorded(), h2.router.recorded()
	if len(p1) != 1 || len(p2) != 1 || p1[0].PromptTokens != p2[0].PromptTokens || p1[0].PromptTokens == 0 {
		t.Errorf("parts prompt %+v, string prompt %+v: want the same token count", p1, p2)
	}
}

func TestUnknownPathsAndMethodsAreEnvelopes(t *testing.T) {
	h := newHarness(t, Config{}, Deps{})
	tests := []struct {
		method, path string
		status       int
		allow        string
	}{
		{"POST", "/v1/audio/speech", 404, ""},
		{"GET", "/nope", 404, ""},
		{"GET", "/v1/chat/completions", 405, "POST"},
		{"POST", "/v1/models", 405, "GET, HEAD"},
		{"DELETE", "/admin/router", 405, "GET, HEAD, PUT"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			resp, body := h.do(t, tc.method, tc.path, "")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if e := decodeError(t, body); e.Code != tc.status || e.Message == "" {
				t.Errorf("error = %+v", e)
			}
			if got := resp.Header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow = %q, want %q", got, tc.allow)
			}
			if resp.Header.Get(headerRequestID) == "" {
				t.Errorf("no x-request-id on a %d", tc.status)
			}
		})
	}
	if got := value(t, h.s.m.duration.WithLabelValues("unmatched").(prometheus.Metric)); got != float64(len(tests)) {
		t.Errorf("duration{unmatched} count = %v, want %d", got, len(tests))
	}
}

func TestRequestIDEchoed(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{APIKey: "k"}, Deps{}, a.worker(RoleAggregated))
	auth := []string{"Authorization", "Bearer k"}
	tests := []struct {
		name, method, path, body string
		hdr                      []string
		want                     string // "" : a generated id
	}{
		{"client id on success", "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"}`, append(auth, headerRequestID, "client-7"), "client-7"},
		{"generated on success", "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"}`, auth, ""},
		{"client id on 400", "POST", "/v1/completions", `{"model":`, append(auth, headerRequestID, "client-8"), "client-8"},
		{"generated on 401", "POST", "/v1/completions", `{}`, nil, ""},
		{"oversized id replaced", "POST", "/v1/completions", `{}`, []string{headerRequestID, strings.Repeat("x", 500)}, ""},
		{"health", "GET", "/health", "", []string{headerRequestID, "client-9"}, "client-9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, _ := h.do(t, tc.method, tc.path, tc.body, tc.hdr...)
			got := resp.Header.Get(headerRequestID)
			switch {
			case tc.want != "" && got != tc.want:
				t.Errorf("x-request-id = %q, want %q", got, tc.want)
			case tc.want == "" && !strings.HasPrefix(got, h.s.reqPrefix):
				t.Errorf("x-request-id = %q, want a generated one (prefix %s)", got, h.s.reqPrefix)
			}
		})
	}
	// The worker got the client's id, made unique (two clients may send
	// the same one, and load tracking is keyed by it).
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.reqIDs) < 1 || !strings.HasPrefix(a.reqIDs[0], "client-7.") {
		t.Errorf("worker request ids %q, want client-7.… first", a.reqIDs)
	}
}

func TestRequestDurationByEndpoint(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	h.do(t, "POST", "/v1/completions", `{"model":"qwen3-0.6b","prompt":"x"}`)
	h.do(t, "POST", "/v1/completions", streamBody)
	h.do(t, "POST", "/v1/chat/completions", `{"model":"qwen3-0.6b"}`) // 400: still a request
	h.do(t, "GET", "/health", "")
	h.do(t, "GET", "/v1/models", "")
	for ep, want := range map[string]float64{"completions": 2, "chat": 1, "/health": 1, "/v1/models": 1} {
		if got := value(t, h.s.m.duration.WithLabelValues(ep).(prometheus.Metric)); got != want {
			t.Errorf("duration{%s} count = %v, want %v", ep, got, want)
		}
	}
}

// routerAdapter presents a real *router.Router as the frontend's Router,
// as the node package does.
type routerAdapter struct{ r *router.Router }

func (a routerAdapter) Pick(_ context.Context, req RouteRequest) (Decision, error) {
	cands := make([]router.Worker, len(req.Candidates))
	for i, id := range req.Candidates {
		cands[i] = router.Worker{ID: id, EventsHealthy: true}
	}
	d, err := a.r.Pick(&router.Request{ID: req.RequestID, Hashes: req.Hashes, PromptTokens: req.PromptTokens, BlockSize: 16}, cands)
	if err != nil {
		return Decision{}, err
	}
	return Decision{WorkerID: d.Worker, OverlapBlocks: d.OverlapBlocks, Policy: d.Policy}, nil
}
func (a routerAdapter) Policy() string              { return a.r.Policy() }
func (a routerAdapter) Policies() []string          { return a.r.Policies() }
func (a routerAdapter) SetPolicy(name string) error { return a.r.SetPolicy(name) }

// TestRotationWithPrefillPool: with two decode workers and a prefill pool,
// each request picks twice (decode, then prefill); round-robin, and kv's
// ties between prompts too short to fill a block (which rotate: longer
// ones go by tie rank), must still alternate the decode workers.
func TestRotationWithPrefillPool(t *testing.T) {
	for _, policy := range []string{router.PolicyRoundRobin, router.PolicyKV} {
		t.Run(policy, func(t *testing.T) {
			d1, d2, p1 := newFakeWorker(t, "decode-1"), newFakeWorker(t, "decode-2"), newFakeWorker(t, "prefill-1")
			r, err := router.New(router.Config{Policy: policy, Now: func() time.Time { return time.Unix(0, 0) }})
			if err != nil {
				t.Fatal(err)
			}
			g := &fakeGate{decision: GateDecision{Reason: "local is faster"}}
			h := newHarness(t, Config{}, Deps{Router: routerAdapter{r}, Gate: g},
				d1.worker(RoleDecode), d2.worker(RoleDecode), p1.worker(RolePrefill))
			got := map[string]int{}
			for i := 0; i < 6; i++ {
				// Unique prompts under one block: nothing cached, so kv
				// sees full ties, and rotates them.
				body, _ := json.Marshal(map[string]any{"model": testModel, "prompt": "word " + string(rune('a'+i))})
				resp, b := h.do(t, "POST", "/v1/completions", string(body))
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				got[resp.Header.Get(HeaderWorker)]++
			}
			if got["decode-1"] != 3 || got["decode-2"] != 3 {
				t.Errorf("decode workers served %v, want 3 each", got)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.inputs) != 6 {
				t.Errorf("gate consulted %d times, want 6 (the prefill pool was picked from)", len(g.inputs))
			}
		})
	}
}
