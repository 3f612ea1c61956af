package frontend

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/admit"
)

// TestQueuedRequestIsServed: with the only worker at
// --max-inflight-per-worker, a standard request waits in the queue,
// without counting on the worker, and is served once the slot frees.
func TestQueuedRequestIsServed(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	a.setMode(modeSlow)
	h := newHarness(t, Config{MaxInflightPerWorker: 1}, Deps{}, a.worker(RoleAggregated))
	body := `{"model":"qwen3-0.6b","prompt":"x"}`
	codes := make(chan int, 2)
	post := func() {
		resp, err := h.srv.Client().Post(h.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			codes <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	go post()
	waitFor(t, "first request in flight", func() bool { return h.s.inflightCounter("w-a").Load() == 1 })
	go post()
	waitFor(t, "second request queued", func() bool { return h.s.AdmissionStats().Queued["standard"] == 1 })
	if n := h.s.inflightCounter("w-a").Load(); n != 1 {
		t.Errorf("worker has %d requests in flight while one is queued, want 1", n)
	}
	for range 2 {
		if c := <-codes; c != 200 {
			t.Errorf("status %d, want 200 for both", c)
		}
	}
	if st := h.s.AdmissionStats(); st.Outcomes["queued"] != 1 || st.Outcomes["admitted"] != 1 {
		t.Errorf("outcomes %v, want one admitted at once and one after queueing", st.Outcomes)
	}
}

// TestTenants: a tenant key names the tenant, an unknown key is refused,
// a bad priority is a 400, and an isolated tenant's prompt is sent with
// its own cache_salt.
func TestTenants(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(p, []byte("tenants:\n  - {name: alpha, key: ka}\n  - {name: beta, key: kb, share_cache: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := admit.LoadTenants(p)
	if err != nil {
		t.Fatal(err)
	}
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{Tenants: ts}, Deps{}, a.worker(RoleAggregated))
	body := `{"model":"qwen3-0.6b","prompt":"hello"}`
	if resp, got := h.do(t, "POST", "/v1/completions", body, "Authorization", "Bearer nope"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown key: status %d: %s", resp.StatusCode, got)
	}
	if resp, got := h.do(t, "POST", "/v1/completions", body, "Authorization", "Bearer ka", HeaderPriority, "urgent"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad priority: status %d: %s", resp.StatusCode, got)
	}
	for _, key := range []string{"ka", "kb"} {
		if resp, got := h.do(t, "POST", "/v1/completions", body, "Authorization", "Bearer "+key); resp.StatusCode != 200 {
			t.Fatalf("key %s: status %d: %s", key, resp.StatusCode, got)
		}
	}
	bodies := a.received()
	salt := func(b []byte) string {
		var v struct {
			CacheSalt string `json:"cache_salt"`
		}
		_ = json.Unmarshal(b, &v)
		return v.CacheSalt
	}
	if got := salt(bodies[0]); !strings.HasPrefix(got, "sy-tenant-") {
		t.Errorf("alpha's request reached the worker with cache_salt %q, want its tenant salt", got)
	}
	if got := salt(bodies[1]); got != "" {
		t.Errorf("beta shares its cache, but its request carries cache_salt %q", got)
	}
}
