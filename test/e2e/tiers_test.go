//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHostMemoryTier evicts a prompt's prefix from a tiny GPU cache into the
// worker's host-memory tier and sends the prompt again: the CPU tier shows
// in /health's index view, the router's tier header and the usage's
// per-tier split, and the loaded bytes are the tokens' KV.
func TestHostMemoryTier(t *testing.T) {
	url := up(t, "--workers", "1", "--kv-blocks", "40", "--kv-offload-gib", "1", "--speedup", "100")
	type health struct {
		Status  string `json:"status"`
		Workers []struct {
			Events struct {
				State         string         `json:"state"`
				IndexedBlocks map[string]int `json:"indexed_blocks"`
			} `json:"events"`
		} `json:"workers"`
	}
	var h health
	eventually(t, 15*time.Second, "a healthy worker", func() bool {
		return getJSON(t, url+"/health", &h) == 200 && len(h.Workers) == 1 && h.Workers[0].Events.State == "healthy"
	})
	words := func(prefix string, n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = prefix + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
		}
		return strings.Join(w, " ")
	}
	type usage struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
				KVTiers      *struct {
					CPUTokens      int   `json:"cpu_tokens"`
					CPULoadedBytes int64 `json:"cpu_loaded_bytes"`
				} `json:"switchyard_kv_tiers"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	complete := func(prompt string) (usage, http.Header) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": "qwen3-0.6b", "prompt": prompt, "max_tokens": 2})
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var u usage
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(raw, &u) != nil {
			t.Fatalf("completion: status %d: %s", resp.StatusCode, raw)
		}
		return u, resp.Header
	}
	// 40 blocks of 16 tokens: b fits, but not beside a.
	a := words("alpha", 100)
	ua, _ := complete(a)
	ub, _ := complete(words("beta", 220))
	t.Logf("prompt tokens: a %d, b %d", ua.Usage.PromptTokens, ub.Usage.PromptTokens)
	eventually(t, 10*time.Second, "blocks indexed in the CPU tier", func() bool {
		return getJSON(t, url+"/health", &h) == 200 && len(h.Workers) == 1 && h.Workers[0].Events.IndexedBlocks["cpu"] > 0
	})
	u, hdr := complete(a)
	tiers := hdr.Get("x-switchyard-overlap-tiers")
	if !strings.Contains(tiers, "cpu=") || strings.Contains(tiers, "cpu=0,") {
		t.Errorf("x-switchyard-overlap-tiers = %q, want cpu tokens", tiers)
	}
	kt := u.Usage.PromptTokensDetails.KVTiers
	if kt == nil || kt.CPUTokens == 0 || kt.CPULoadedBytes != int64(kt.CPUTokens)*114688 {
		t.Fatalf("usage tiers %+v (cached %d): want cpu tokens loaded at 114,688 bytes each", kt, u.Usage.PromptTokensDetails.CachedTokens)
	}
}
