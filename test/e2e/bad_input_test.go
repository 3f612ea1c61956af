//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestOversizedPromptsBounded: twelve prompts of 3.5M tokens each, far past
// the worker's max_model_len, are refused 400 by the frontend itself (the
// worker never sees them) and cost its resident memory no more than a few
// of their bodies, whatever their token count.
func TestOversizedPromptsBounded(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	c := startCluster(t, ns.URL(), 1, nil, nil)
	if r := chat(t.Context(), c.url, "warm up the frontend", 4); r.err != nil {
		t.Fatalf("warm-up request: %v", r.err)
	}
	before := metric(t, c.url, "process_resident_memory_bytes")
	// " a" is one cl100k token: 7 MB of body, 3.5M tokens, under the 8 MiB
	// body limit.
	prompt := strings.Repeat("a ", 3_500_000)
	for i := range 12 {
		var body []byte
		if i%2 == 0 {
			body, _ = json.Marshal(map[string]any{"model": "qwen3-0.6b", "prompt": prompt, "max_tokens": 4})
		} else {
			body, _ = json.Marshal(map[string]any{"model": "qwen3-0.6b", "max_tokens": 4,
				"messages": []map[string]string{{"role": "user", "content": prompt}}})
		}
		path := "/v1/completions"
		if i%2 == 1 {
			path = "/v1/chat/completions"
		}
		resp, err := http.Post(c.url+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("oversized prompt %d: %v", i, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !bytes.Contains(got, []byte("maximum context length")) {
			t.Errorf("oversized prompt %d: status %d %s; want 400 naming the maximum context length", i, resp.StatusCode, got[:min(len(got), 300)])
		}
		if hdr := resp.Header.Get("x-switchyard-worker"); hdr != "" {
			t.Errorf("oversized prompt %d reached worker %s", i, hdr)
		}
	}
	after := metric(t, c.url, "process_resident_memory_bytes")
	growth := (after - before) / 1e6
	bodyMB := float64(len(prompt)) / 1e6
	t.Logf("frontend RSS %.1f MB before, %.1f MB after twelve 3.5M-token prompts (+%.1f MB; one body is %.1f MB)", before/1e6, after/1e6, growth, bodyMB)
	// Each body is read whole before it can be judged, and decoded into
	// its prompt string; what remains is the garbage collector's headroom
	// over a few of them (measured: RSS levels off after the third, at
	// +23 to +29 MB, 3.3 to 4.2 bodies, where tokenizing and hashing them
	// took +209 MB). Twelve must cost no more than six bodies.
	if growth > 6*bodyMB {
		t.Errorf("frontend RSS grew %.1f MB for twelve oversized prompts; want at most 6 bodies (%.0f MB): memory must not grow with the prompt's tokens", growth, 6*bodyMB)
	}
}

// TestKVXferPingFlood: 300 connections that only ping the prefill worker's
// KV transfer port (no lease, no key) must not hold the slots pulls need:
// disaggregated requests keep moving their KV over it.
func TestKVXferPingFlood(t *testing.T) {
	t.Parallel()
	url := up(t, "--workers", "1", "--prefill-workers", "1", "--disagg", "always", "--speedup", "20")
	var h struct {
		Workers []struct {
			Role       string `json:"role"`
			KVXferAddr string `json:"kvxfer_addr"`
		} `json:"workers"`
	}
	getJSON(t, url+"/health", &h)
	addr := ""
	for _, w := range h.Workers {
		if w.Role == "prefill" {
			addr = w.KVXferAddr
		}
	}
	if addr == "" {
		t.Fatalf("no prefill worker with a kvxfer address in /health: %+v", h)
	}
	// A ping frame: type 0x03, length 8, an 8-byte nonce; the pong is 13 bytes.
	ping := []byte{0x03, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8}
	answered := 0
	for range 300 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial kvxfer %s: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(ping); err == nil {
			if _, err := io.ReadFull(c, make([]byte, 13)); err == nil {
				answered++
			}
		}
	}
	prompt := strings.Repeat("switchyard signal lantern ", 200)
	for i := range 5 {
		body := fmt.Sprintf(`{"model":"qwen3-0.6b","prompt":"%d %s","max_tokens":2}`, i, prompt)
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("x-switchyard-prefill") != "remote" || resp.Header.Get("x-switchyard-kv-bytes") == "0" {
			t.Errorf("request %d with 300 ping-only kvxfer connections open: status %d, prefill %q (%s), kv bytes %q", i, resp.StatusCode,
				resp.Header.Get("x-switchyard-prefill"), resp.Header.Get("x-switchyard-prefill-reason"), resp.Header.Get("x-switchyard-kv-bytes"))
		}
	}
	t.Logf("%d of 300 ping-only connections were answered before being evicted", answered)
}

// TestBodiesReadTwoWays: a body whose keys an engine would read otherwise
// than the frontend's decoder (a case variant hiding kv_transfer_params, a
// field given twice) and a prompt that is not UTF-8 are refused 400 with
// an OpenAI error, and never forwarded.
func TestBodiesReadTwoWays(t *testing.T) {
	t.Parallel()
	url := up(t, "--workers", "1", "--speedup", "20")
	refused := 0
	for _, tc := range []struct{ name, body, param string }{
		{"kv_transfer_params behind a case variant", `{"model":"qwen3-0.6b","prompt":"x","max_tokens":2,"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.0.0.1","remote_port":1},"KV_TRANSFER_PARAMS":null}`, "kv_transfer_params"},
		{"max_tokens twice", `{"model":"qwen3-0.6b","prompt":"x","max_tokens":2,"Max_Tokens":100000}`, "max_tokens"},
		{"invalid UTF-8", "{\"model\":\"qwen3-0.6b\",\"prompt\":\"caf\xe9\",\"max_tokens\":2}", ""},
	} {
		code, body := postJSON(t, url+"/v1/completions", tc.body)
		var e struct {
			Error struct {
				Code  int     `json:"code"`
				Param *string `json:"param"`
			} `json:"error"`
		}
		param := ""
		if json.Unmarshal([]byte(body), &e) == nil && e.Error.Param != nil {
			param = *e.Error.Param
		}
		if code != http.StatusBadRequest || e.Error.Code != 400 || param != tc.param {
			t.Errorf("%s: %d %s; want 400 with param %q", tc.name, code, body, tc.param)
		} else {
			refused++
		}
	}
	t.Logf("%d of 3 bodies that decode two ways (or are not UTF-8) refused 400", refused)
}
