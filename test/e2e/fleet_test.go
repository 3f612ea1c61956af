//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// fleetArgs is a fleet in one up: two base models on two workers each,
// one LoRA adapter per base model, one adapter slot per worker.
var fleetArgs = []string{"--model", "qwen3-0.6b,llama-3.1-8b", "--gpu", "h100", "--workers", "4",
	"--lora-modules", "lora-q=qwen3-0.6b,lora-l=llama-3.1-8b", "--max-loras", "1",
	"--kv-blocks", "2000", "--speedup", "20"}

// complete sends one completion and returns its status, serving worker and
// body.
func complete(t *testing.T, url, model, prompt string) (int, string, []byte, http.Header) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 2})
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", model, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("x-switchyard-worker"), b, resp.Header
}

// TestFleet: one frontend in front of two base models and two adapters.
// Every request lands on a worker of its model; an adapter's repeated
// prefixes hit the cache under kv (its blocks are indexed under the
// adapter's root) and less under round-robin; an adapter request goes to
// the worker that holds the adapter even when another has the emptier
// cache; /v1/models is the union; an unknown model is 404.
func TestFleet(t *testing.T) {
	t.Parallel()
	hits := map[string]int{}
	for _, policy := range []string{"kv", "round-robin"} {
		t.Run(policy, func(t *testing.T) {
			url := up(t, append(slices.Clone(fleetArgs), "--router", policy)...)
			var h struct {
				Models  []string `json:"models"`
				Workers []struct {
					ID    string `json:"id"`
					Model string `json:"model"`
				} `json:"workers"`
			}
			getJSON(t, url+"/health", &h)
			modelOf := map[string]string{}
			for _, w := range h.Workers {
				modelOf[w.ID] = w.Model
			}
			if len(modelOf) != 4 || !slices.Equal(h.Models, []string{"llama-3.1-8b", "qwen3-0.6b"}) {
				t.Fatalf("/health: workers %v, models %q", modelOf, h.Models)
			}
			base := map[string]string{"qwen3-0.6b": "qwen3-0.6b", "llama-3.1-8b": "llama-3.1-8b", "lora-q": "qwen3-0.6b", "lora-l": "llama-3.1-8b"}

			var out struct {
				PrefixTexts []string `json:"prefixTexts"`
				Rows        []struct {
					K      int    `json:"k"`
					Worker string `json:"worker"`
					Cached int    `json:"cached"`
				} `json:"rows"`
			}
			node(t, "routing", url, map[string]any{"n": 60, "prefixes": 5, "prefixWords": 1500, "model": "lora-q"}, &out)
			tk, err := tokenizer.New()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range out.Rows {
				if modelOf[r.Worker] != "qwen3-0.6b" {
					t.Errorf("a lora-q request went to %s, which serves %q", r.Worker, modelOf[r.Worker])
				}
				shared := len(tk.Encode("<|im_start|>system\n" + out.PrefixTexts[r.K] + "<|im_end|>\n<|im_start|>user\n"))
				if r.Cached >= shared/16*16 {
					hits[policy]++
				}
			}
			if len(out.Rows) != 60 {
				t.Fatalf("got %d rows, want 60", len(out.Rows))
			}
			// Each model and adapter lands in its own pool.
			for model, b := range base {
				for i := range 4 {
					code, w, body, _ := complete(t, url, model, fmt.Sprintf("pool check %d for %s", i, model))
					if code != 200 || modelOf[w] != b {
						t.Errorf("%s: status %d on %s (serves %q), want a worker of %s: %s", model, code, w, modelOf[w], b, body)
					}
				}
			}
			if policy != "kv" {
				return
			}
			// lora-l: the first request loads it on one worker; later ones,
			// prompts no worker caches, follow it there although the other
			// worker's cache is emptier (kv's tie-breaker without affinity).
			code, first, body, _ := complete(t, url, "lora-l", strings.Repeat("an adapter's first prompt ", 40))
			if code != 200 {
				t.Fatalf("lora-l: %d %s", code, body)
			}
			for i := range 6 {
				code, w, body, _ := complete(t, url, "lora-l", strings.Repeat(fmt.Sprintf("unrelated prompt %d ", i), 30))
				if code != 200 || w != first {
					t.Errorf("lora-l request %d went to %s (status %d), want %s, which holds the adapter: %s", i, w, code, first, body)
				}
			}

			var list struct {
				Data []struct {
					ID     string  `json:"id"`
					Parent *string `json:"parent"`
					Root   string  `json:"root"`
				} `json:"data"`
			}
			getJSON(t, url+"/v1/models", &list)
			var ids []string
			for _, m := range list.Data {
				ids = append(ids, m.ID)
				if _, isBase := map[string]bool{"qwen3-0.6b": true, "llama-3.1-8b": true}[m.ID]; !isBase && (m.Parent == nil || *m.Parent != base[m.ID]) {
					t.Errorf("/v1/models: %s has parent %v, want %s", m.ID, m.Parent, base[m.ID])
				}
			}
			if want := []string{"llama-3.1-8b", "lora-l", "lora-q", "qwen3-0.6b"}; !slices.Equal(ids, want) {
				t.Errorf("/v1/models lists %q, want the union %q", ids, want)
			}
			code, _, body, _ = complete(t, url, "no-such-model", "x")
			var e struct {
				Error struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if code != 404 || json.Unmarshal(body, &e) != nil || e.Error.Code != "model_not_found" {
				t.Errorf("unknown model: %d %s, want 404 model_not_found", code, body)
			}
		})
	}
	t.Logf("\n| policy | lora-q cache hits (of 60) |\n|---|---|\n| kv | %d |\n| round-robin | %d |", hits["kv"], hits["round-robin"])
	if hits["kv"] < 57 {
		t.Errorf("kv: %d of 60 adapter requests hit their prefix, want at least 57", hits["kv"])
	}
	if hits["round-robin"] >= hits["kv"] {
		t.Errorf("round-robin: %d hits, not below kv's %d", hits["round-robin"], hits["kv"])
	}
}

// TestFleetModelGone: when every worker of one model dies, its requests get
// 503 with Retry-After naming it, while the other model is served.
func TestFleetModelGone(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	_, m := start(t, readyURL, "frontend", "--http-addr", "127.0.0.1:0", "--nats", ns.URL(), "--nats-insecure", "--registry-ttl", "2s")
	url := m[1]
	workers := map[string]*proc{}
	for id, name := range map[string]string{"a1": "model-a", "a2": "model-a", "b1": "model-b"} {
		p, _ := start(t, readyURL, "worker", "--nats", ns.URL(), "--nats-insecure", "--registry-ttl", "2s", "--id", id, "--http-addr", "127.0.0.1:0",
			"--served-model-name", name, "--speedup", "20")
		workers[id] = p
	}
	eventually(t, 30*time.Second, "3 workers routable", func() bool {
		var h struct {
			Workers []struct{ ID string } `json:"workers"`
		}
		getJSON(t, url+"/health", &h)
		return len(h.Workers) == 3
	})
	for _, model := range []string{"model-a", "model-b"} {
		if code, _, body, _ := complete(t, url, model, "hello"); code != 200 {
			t.Fatalf("%s: %d %s", model, code, body)
		}
	}
	workers["a1"].kill()
	workers["a2"].kill()
	eventually(t, 20*time.Second, "model-a's workers expired", func() bool {
		code, _, _, _ := complete(t, url, "model-a", "hello")
		return code == 503
	})
	code, _, body, hdr := complete(t, url, "model-a", "hello")
	if code != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(string(body), `model \"model-a\"`) {
		t.Errorf("model-a without workers: %d (Retry-After %q) %s, want 503 naming it with Retry-After", code, hdr.Get("Retry-After"), body)
	}
	if code, w, body, _ := complete(t, url, "model-b", "hello"); code != 200 || w != "b1" {
		t.Errorf("model-b: %d on %s: %s", code, w, body)
	}
}

// TestFleetConfig: --config gives one model its own block size and routing
// policy; the other keeps the flags'.
func TestFleetConfig(t *testing.T) {
	t.Parallel()
	conf := t.TempDir() + "/switchyard.yaml"
	if err := os.WriteFile(conf, []byte("models:\n  llama-3.1-8b:\n    block_size: 32\n    router:\n      policy: round-robin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := up(t, "--model", "qwen3-0.6b,llama-3.1-8b", "--gpu", "h100", "--workers", "4", "--speedup", "20", "--config", conf)
	var h struct {
		Workers []struct {
			ID        string `json:"id"`
			Model     string `json:"model"`
			BlockSize int    `json:"block_size"`
		} `json:"workers"`
	}
	getJSON(t, url+"/health", &h)
	for _, w := range h.Workers {
		if want := map[string]int{"qwen3-0.6b": 16, "llama-3.1-8b": 32}[w.Model]; w.BlockSize != want {
			t.Errorf("%s (%s): block size %d, want %d", w.ID, w.Model, w.BlockSize, want)
		}
	}
	seen := map[string]bool{}
	for i := range 4 {
		code, w, body, hdr := complete(t, url, "llama-3.1-8b", strings.Repeat("the same prompt ", 50))
		if code != 200 || hdr.Get("x-switchyard-policy") != "round-robin" {
			t.Errorf("llama %d: %d policy %q: %s", i, code, hdr.Get("x-switchyard-policy"), body)
		}
		seen[w] = true
		code, _, body, hdr = complete(t, url, "qwen3-0.6b", "hello")
		if code != 200 || hdr.Get("x-switchyard-policy") != "kv" {
			t.Errorf("qwen %d: %d policy %q: %s", i, code, hdr.Get("x-switchyard-policy"), body)
		}
	}
	if len(seen) != 2 {
		t.Errorf("round-robin sent the same llama prompt to %v, want both llama workers", seen)
	}
}

// TestBenchModelMix: bench --model a:0.7,b:0.3 sends each model its share
// of the requests, as the frontend counts them by model.
func TestBenchModelMix(t *testing.T) {
	t.Parallel()
	url := up(t, "--model", "qwen3-0.6b,llama-3.1-8b", "--gpu", "h100", "--workers", "2", "--speedup", "20")
	out, err := exec.Command(binary(t), "bench", "routing", "--url", url, "--requests", "100", "--prefixes", "2",
		"--prefix-tokens", "200", "--model", "qwen3-0.6b:0.7,llama-3.1-8b:0.3").CombinedOutput()
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	q := metric(t, url, `switchyard_model_requests_total{code="200",model="qwen3-0.6b"}`)
	l := metric(t, url, `switchyard_model_requests_total{code="200",model="llama-3.1-8b"}`)
	// The draws are equidistributed (TestModelMix): within a few requests
	// of 70:30 over bench's requests and warm-ups.
	t.Logf("served %v qwen3-0.6b and %v llama-3.1-8b requests", q, l)
	if share := q / (q + l); q+l < 100 || share < 0.65 || share > 0.75 {
		t.Errorf("served %v qwen3-0.6b and %v llama-3.1-8b requests (qwen share %.2f), want about 70:30\n%s", q, l, share, out)
	}
}

// TestFleetAdapterAtRunTime: an adapter loaded into a running worker with
// vLLM's POST /v1/load_lora_adapter is listed by the frontend and routed to
// within 10 s; unloaded, it leaves the list.
func TestFleetAdapterAtRunTime(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	_, m := start(t, readyURL, "frontend", "--http-addr", "127.0.0.1:0", "--nats", ns.URL(), "--nats-insecure")
	url := m[1]
	_, wm := start(t, readyURL, "worker", "--nats", ns.URL(), "--nats-insecure", "--id", "w1", "--http-addr", "127.0.0.1:0", "--speedup", "20")
	wurl := wm[1]
	listed := func(id string) bool {
		var list struct {
			Data []struct{ ID string } `json:"data"`
		}
		getJSON(t, url+"/v1/models", &list)
		return slices.ContainsFunc(list.Data, func(d struct{ ID string }) bool { return d.ID == id })
	}
	eventually(t, 30*time.Second, "the worker's model listed", func() bool { return listed("qwen3-0.6b") })
	post := func(path, body string) int {
		resp, err := http.Post(wurl+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/v1/load_lora_adapter", `{"lora_name":"sql-lora","lora_path":"/adapters/sql"}`); code != 200 {
		t.Fatalf("load_lora_adapter: %d", code)
	}
	eventually(t, 10*time.Second, "the loaded adapter in the frontend's /v1/models", func() bool { return listed("sql-lora") })
	if code, w, body, _ := complete(t, url, "sql-lora", "select the rows"); code != 200 || w != "w1" {
		t.Errorf("sql-lora: %d on %q: %s", code, w, body)
	}
	if code := post("/v1/unload_lora_adapter", `{"lora_name":"sql-lora"}`); code != 200 {
		t.Fatalf("unload_lora_adapter: %d", code)
	}
	eventually(t, 10*time.Second, "the unloaded adapter gone from /v1/models", func() bool { return !listed("sql-lora") })
}

// TestFleetPreflight: preflight checks each model of a fleet on its own
// workers and passes both.
func TestFleetPreflight(t *testing.T) {
	t.Parallel()
	// Real-time and the default GPU, as TestPreflightHealthy: the
	// same-prefix probe compares wall-clock TTFTs, which a fast preset or
	// a speedup shrinks into the noise of a busy host.
	url := up(t, "--model", "qwen3-0.6b,llama-3.1-8b", "--workers", "4")
	out, err := exec.Command(binary(t), "preflight", "--url", url).Output()
	if err != nil {
		t.Fatalf("preflight: %v\n%s", err, out)
	}
	for _, m := range []string{"qwen3-0.6b", "llama-3.1-8b"} {
		i := strings.Index(string(out), "model "+m+"\n")
		if i < 0 || !strings.Contains(string(out[i:]), "verdict: PASS") {
			t.Errorf("no passing report for %s:\n%s", m, out)
		}
	}
}
