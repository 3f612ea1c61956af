package frontend

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAdminRouterPolicy(t *testing.T) {
	h := newHarness(t, Config{}, Deps{})
	resp, body := h.do(t, "GET", "/admin/router", "")
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"policy":"kv","policies":["kv","round-robin","random","least-loaded"]}` {
		t.Errorf("GET /admin/router = %d %s", resp.StatusCode, body)
	}
	resp, body = h.do(t, "PUT", "/admin/router", `{"policy":"round-robin"}`)
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"policy":"round-robin"}` {
		t.Errorf("PUT round-robin = %d %s", resp.StatusCode, body)
	}
	if got := h.router.Policy(); got != "round-robin" {
		t.Errorf("router policy = %q", got)
	}
	resp, body = h.do(t, "PUT", "/admin/router", `{"policy":"astrology"}`)
	if e := decodeError(t, body); resp.StatusCode != 400 || !strings.Contains(e.Message, "astrology") {
		t.Errorf("PUT unknown = %d %+v", resp.StatusCode, e)
	} else if n := strings.Count(e.Message, "round-robin"); n != 1 {
		t.Errorf("PUT unknown: %q lists the policies %d times, want once", e.Message, n)
	}
}

func TestAdminAuthWithoutKeysIsLoopbackOnly(t *testing.T) {
	h := newHarness(t, Config{}, Deps{})
	for _, tc := range []struct {
		addr   string
		status int
	}{{"127.0.0.1:5555", 200}, {"[::1]:5555", 200}, {"192.0.2.7:5555", 401}} {
		req := httptest.NewRequest("GET", "/admin/router", nil)
		req.RemoteAddr = tc.addr
		rec := httptest.NewRecorder()
		h.s.Handler().ServeHTTP(rec, req)
		if rec.Code != tc.status {
			t.Errorf("from %s: status %d, want %d", tc.addr, rec.Code, tc.status)
		}
	}
}

func TestAdminResetCache(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated), b.worker(RolePrefill))
	resp, body := h.do(t, "POST", "/admin/reset-cache", "")
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"workers":2}` {
		t.Errorf("reset-cache = %d %s", resp.StatusCode, body)
	}
	for _, fw := range []*fakeWorker{a, b} {
		fw.mu.Lock()
		if fw.resets != 1 {
			t.Errorf("%s resets = %d, want 1", fw.id, fw.resets)
		}
		fw.mu.Unlock()
	}
	b.srv.Close()
	resp, body = h.do(t, "POST", "/admin/reset-cache", "")
	if e := decodeError(t, body); resp.StatusCode != 502 || !strings.Contains(e.Message, "w-b") {
		t.Errorf("reset-cache with a dead worker = %d %+v", resp.StatusCode, e)
	}
}

func TestAdminEventsAndHealth(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	ev := &fakeEvents{m: map[string]EventStatus{
		"w-a": {State: "healthy", Epoch: 3, LastSeq: 41, LastEventAge: 250 * time.Millisecond, Batches: 41, Blocks: 900},
		"w-b": {State: "silent", Cause: "no batch for 12s", Epoch: 1, LastSeq: 7, Gaps: 1},
	}}
	wa := a.worker(RoleAggregated)
	wa.Load = Load{Running: 2, Waiting: 1, KVUsage: 0.25}
	h := newHarness(t, Config{}, Deps{Events: ev}, wa, b.worker(RoleAggregated))

	resp, body := h.do(t, "GET", "/admin/events", "")
	var got struct {
		Workers []struct {
			ID     string         `json:"id"`
			Known  bool           `json:"known"`
			Events map[string]any `json:"events"`
		} `json:"workers"`
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 || len(got.Workers) != 2 {
		t.Fatalf("events = %d %s (%v)", resp.StatusCode, body, err)
	}
	if e := got.Workers[0].Events; e["state"] != "healthy" || e["last_seq"] != 41.0 || e["last_event_age_s"] != 0.25 || e["blocks"] != 900.0 {
		t.Errorf("w-a events = %v", e)
	}
	if e := got.Workers[1].Events; e["state"] != "silent" || e["cause"] != "no batch for 12s" || e["gaps"] != 1.0 {
		t.Errorf("w-b events = %v", e)
	}

	resp, body = h.do(t, "GET", "/health", "")
	var hl Health
	if err := json.Unmarshal(body, &hl); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || hl.Status != HealthDegraded || !strings.Contains(hl.Reason, "w-b events silent") {
		t.Errorf("health = %d %+v", resp.StatusCode, hl)
	}
	if hl.Model != testModel || hl.BlockSize != 16 || hl.Policy != "kv" || hl.Disagg != DisaggAuto || len(hl.Workers) != 2 {
		t.Errorf("health header fields = %+v", hl)
	}
	if w0 := hl.Workers[0]; w0.ID != "w-a" || w0.Role != RoleAggregated || w0.URL != a.srv.URL || w0.Load.Running != 2 || w0.Events.State != "healthy" {
		t.Errorf("health worker = %+v", w0)
	}

	ev.set("w-b", EventStatus{State: "healthy"})
	resp, body = h.do(t, "GET", "/health", "")
	hl = Health{}
	if err := json.Unmarshal(body, &hl); err != nil || resp.StatusCode != 200 || hl.Status != HealthOK || hl.Reason != "" {
		t.Errorf("all healthy: %d %s", resp.StatusCode, body)
	}
}

func TestAdminLookup(t *testing.T) {
	idx := fakeIndex{"w-a": 2, "w-b": 100}
	h := newHarness(t, Config{BlockSize: 4}, Deps{Index: idx})
	resp, body := h.do(t, "POST", "/admin/lookup", `{"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13],"cache_salt":"s"}`)
	var got lookupResponse
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("lookup = %d %s", resp.StatusCode, body)
	}
	if got.Blocks != 3 || got.BlockSize != 4 || got.Tokens != 13 || got.Overlaps["w-a"] != 2 || got.Overlaps["w-b"] != 3 {
		t.Errorf("lookup = %+v", got)
	}
	resp, _ = h.do(t, "POST", "/admin/lookup", `{"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Errorf("lookup with messages = %d", resp.StatusCode)
	}
	resp, _ = h.do(t, "POST", "/admin/lookup", `{"cache_salt":"s"}`)
	if resp.StatusCode != 400 {
		t.Errorf("lookup without prompt = %d, want 400", resp.StatusCode)
	}
}

func TestPinWorker(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	h := newHarness(t, Config{APIKey: "k", AdminKey: "adm"}, Deps{Index: fakeIndex{"w-b": 1}}, a.worker(RoleAggregated), b.worker(RolePrefill))
	body := `{"model":"qwen3-0.6b","prompt":"` + strings.Repeat("word ", 40) + `"}`
	tests := []struct {
		name, auth, pin string
		status          int
		worker          string
	}{
		{"pinned with admin", "Bearer adm", "w-b", 200, "w-b"},
		{"pin without admin", "Bearer k", "w-b", 403, ""},
		{"unknown worker", "Bearer adm", "w-zz", 400, ""},
		{"no pin", "Bearer k", "", 200, "w-a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, got := h.do(t, "POST", "/v1/completions", body, "Authorization", tc.auth, HeaderPinWorker, tc.pin)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, got)
			}
			if tc.status == 200 && resp.Header.Get(HeaderWorker) != tc.worker {
				t.Errorf("worker = %q, want %q", resp.Header.Get(HeaderWorker), tc.worker)
			}
			if tc.pin != "" && tc.status == 200 && (resp.Header.Get(HeaderPolicy) != "pinned" || resp.Header.Get(HeaderOverlapTokens) != "16") {
				t.Errorf("pinned headers: policy %q overlap %q", resp.Header.Get(HeaderPolicy), resp.Header.Get(HeaderOverlapTokens))
			}
		})
	}
	if n := len(h.router.recorded()); n != 1 {
		t.Errorf("router asked %d times; a pinned request must bypass it", n)
	}
}
