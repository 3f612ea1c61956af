package frontend

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// fleetWorkers are two base models: a on a1 (also served as a-chat, with
// the adapter a-lora) and a2; b on b1.
func fleetWorkers(t *testing.T) (a1, a2, b1 Worker) {
	a1 = newFakeWorker(t, "a1").worker(RoleAggregated)
	a1.Model, a1.Aliases, a1.Adapters, a1.Created = "a", []string{"a-chat"}, []Adapter{{Name: "a-lora", Root: "/adapters/a-lora"}}, 1000
	a2 = newFakeWorker(t, "a2").worker(RoleAggregated)
	a2.Model, a2.MaxModelLen, a2.Created = "a", 2048, 900
	b1 = newFakeWorker(t, "b1").worker(RoleAggregated)
	b1.Model = "b"
	return a1, a2, b1
}

func TestFleetRoutesByModel(t *testing.T) {
	a1, a2, b1 := fleetWorkers(t)
	h := newHarness(t, Config{Model: anyModel, BlockSizes: map[string]int{"b": 32}}, Deps{}, a1, a2, b1)
	prompt := strings.Repeat("the same long prompt on every model ", 20)
	tests := []struct {
		model   string
		want    []string // candidates
		adapter string
		bs      int
	}{
		{"a", []string{"a1", "a2"}, "", 16},
		{"a-chat", []string{"a1", "a2"}, "", 16}, // an alias is its base's pool
		{"a-lora", []string{"a1"}, "a-lora", 16}, // an adapter's pool is the workers holding it
		{"b", []string{"b1"}, "", 32},
	}
	for _, tc := range tests {
		n := len(h.router.recorded())
		resp, body := h.do(t, "POST", "/v1/completions", `{"model":"`+tc.model+`","prompt":"`+prompt+`","max_tokens":2}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.model, resp.StatusCode, body)
		}
		picks := h.router.recorded()[n:]
		if len(picks) != 1 || !slices.Equal(picks[0].Candidates, tc.want) {
			t.Errorf("%s: picks %+v, want one among %v", tc.model, picks, tc.want)
			continue
		}
		salt := ""
		if tc.adapter != "" {
			salt = kvindex.LoRASalt(tc.adapter, "")
		}
		toks := h.s.tok.EncodePrompt(prompt)
		if want := kvindex.HashChain(nil, salt, toks, tc.bs); !slices.Equal(picks[0].Hashes, want) {
			t.Errorf("%s: hashed %d blocks, not as the engine keys them (salt %q, block size %d)", tc.model, len(picks[0].Hashes), salt, tc.bs)
		}
	}

	// Never served: 404 in OpenAI's shape.
	resp, body := h.do(t, "POST", "/v1/completions", `{"model":"zzz","prompt":"x"}`)
	if e := decodeError(t, body); resp.StatusCode != http.StatusNotFound || e.CodeName != ErrCodeModelNotFound || !strings.Contains(e.Message, `"zzz"`) {
		t.Errorf("unknown model: %d %s", resp.StatusCode, body)
	}
	// Served before, its workers gone: 503 naming it, with Retry-After.
	h.pool.mu.Lock()
	h.pool.workers = []Worker{a1, a2}
	h.pool.mu.Unlock()
	resp, body = h.do(t, "POST", "/v1/completions", `{"model":"b","prompt":"x"}`)
	if e := decodeError(t, body); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(e.Message, `model "b"`) {
		t.Errorf("model without workers: %d (Retry-After %q) %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	var hl Health
	_, body = h.do(t, "GET", "/health", "")
	if err := json.Unmarshal(body, &hl); err != nil || hl.Status != HealthDegraded || !strings.Contains(hl.Reason, `model "b" has no aggregated or decode worker`) {
		t.Errorf("/health with model b gone: %s %q (%v)", hl.Status, hl.Reason, err)
	}
	// Counted by model, the names the workers registered; the client's
	// unknown name is not a label.
	for _, c := range []struct {
		model, code string
		want        float64
	}{{"a-lora", "200", 1}, {"b", "200", 1}, {"b", "503", 1}, {"unknown", "404", 1}, {"zzz", "404", 0}} {
		if got := value(t, h.s.m.modelRequests.WithLabelValues(c.model, c.code)); got != c.want {
			t.Errorf("switchyard_model_requests_total{model=%q,code=%q} = %v, want %v", c.model, c.code, got, c.want)
		}
	}
}

func TestFleetModels(t *testing.T) {
	a1, a2, b1 := fleetWorkers(t)
	h := newHarness(t, Config{Model: anyModel}, Deps{}, a1, a2, b1)
	resp, body := h.do(t, "GET", "/v1/models", "")
	var list openai.ModelList
	if err := json.Unmarshal(body, &list); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/models: %d %s", resp.StatusCode, body)
	}
	str := func(p *string) string {
		if p == nil {
			return "null"
		}
		return *p
	}
	var got []string
	for _, m := range list.Data {
		got = append(got, m.ID+" root="+m.Root+" parent="+str(m.Parent)+" len="+strconv.Itoa(m.MaxModelLen)+" created="+strconv.Itoa(int(m.Created)))
	}
	want := []string{
		"a root=a parent=null len=2048 created=900", // the smallest max_model_len, the earliest start
		"a-chat root=a parent=null len=4096 created=1000",
		"a-lora root=/adapters/a-lora parent=a len=4096 created=1000",
		"b root=b parent=null len=4096 created=" + strconv.Itoa(int(h.s.started.Unix())),
	}
	if !slices.Equal(got, want) {
		t.Errorf("GET /v1/models:\n got %q\nwant %q", got, want)
	}
	resp, body = h.do(t, "GET", "/v1/models/a-lora", "")
	var m openai.Model
	if err := json.Unmarshal(body, &m); resp.StatusCode != http.StatusOK || err != nil || m.ID != "a-lora" || str(m.Parent) != "a" {
		t.Errorf("GET /v1/models/a-lora: %d %s", resp.StatusCode, body)
	}
	resp, body = h.do(t, "GET", "/v1/models/zzz", "")
	if e := decodeError(t, body); resp.StatusCode != http.StatusNotFound || e.CodeName != ErrCodeModelNotFound {
		t.Errorf("GET /v1/models/zzz: %d %s", resp.StatusCode, body)
	}
	var hl Health
	_, body = h.do(t, "GET", "/health", "")
	if err := json.Unmarshal(body, &hl); err != nil || !slices.Equal(hl.Models, []string{"a", "b"}) || hl.Model != "" {
		t.Errorf("/health models %q model %q (%v)", hl.Models, hl.Model, err)
	}
}

// A decode worker's prefill pool is its own model's prefill workers.
func TestFleetPrefillPoolPerModel(t *testing.T) {
	d := newFakeWorker(t, "da").worker(RoleDecode)
	d.Model = "a"
	pa := newFakeWorker(t, "pa").worker(RolePrefill)
	pa.Model = "a"
	pb := newFakeWorker(t, "pb").worker(RolePrefill)
	pb.Model = "b"
	g := &fakeGate{decision: GateDecision{Remote: false, Reason: "test"}}
	h := newHarness(t, Config{Model: anyModel}, Deps{Gate: g}, d, pb, pa)
	resp, body := h.do(t, "POST", "/v1/completions", `{"model":"a","prompt":"x","max_tokens":2}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	picks := h.router.recorded()
	if len(picks) != 2 || !slices.Equal(picks[1].Candidates, []string{"pa"}) {
		t.Errorf("picks %+v, want the decode pick and then one among [pa]", picks)
	}
}
