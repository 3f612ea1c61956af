package frontend

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestOversizedPromptRefusedCheaply: a prompt far past max_model_len is
// refused 400 before it reaches a worker, and refusing it allocates little
// beyond its body (which is read whole first): no token list, no hashes.
func TestOversizedPromptRefusedCheaply(t *testing.T) {
	a := newFakeWorker(t, "w-a") // max_model_len 4096
	h := newHarness(t, Config{MaxBodyBytes: 16 << 20}, Deps{}, a.worker(RoleAggregated))
	prompt := strings.Repeat("a ", 1_000_000) // 1M tokens, 2 MB
	for _, tc := range []struct{ name, path, body string }{
		{"completion", "/v1/completions", mustJSON(t, map[string]any{"model": testModel, "prompt": prompt})},
		{"chat", "/v1/chat/completions", mustJSON(t, map[string]any{"model": testModel, "messages": []map[string]string{{"role": "user", "content": prompt}}})},
		{"just over", "/v1/completions", mustJSON(t, map[string]any{"model": testModel, "prompt": strings.Repeat("a ", 4100)})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			resp, body := h.do(t, "POST", tc.path, tc.body)
			runtime.ReadMemStats(&after)
			if resp.StatusCode != 400 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if e := decodeError(t, body); !strings.Contains(e.Message, "maximum context length is 4096") {
				t.Errorf("error %q does not name the context length", e.Message)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: %d-byte body, %.1f MB allocated", tc.name, len(tc.body), float64(alloc)/1e6)
			// The body, read and held once, and a chunk's tokens; tokens
			// and hashes of the whole prompt would be 2× the body more.
			if limit := uint64(len(tc.body))*3 + 4<<20; alloc > limit {
				t.Errorf("refusing it allocated %d bytes, want at most %d", alloc, limit)
			}
		})
	}
	if n := len(a.received()); n != 0 {
		t.Errorf("oversized prompts reached the worker %d times", n)
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
