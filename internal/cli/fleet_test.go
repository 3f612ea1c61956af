package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --config fills per-model settings; a bad file stops start-up naming the
// file, the line and the key.
func TestFleetConfigFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("models:\n  llama-3.1-8b:\n    block_size: 32\n    tokenizer: cl100k\n    router: {policy: round-robin, alpha: 2}\n    disagg: never\n"), 0o600)
	var stderr bytes.Buffer
	f, code := parseFrontendFlags([]string{"--config", good}, Env{Stderr: &stderr})
	m := f.node.Models["llama-3.1-8b"]
	if code != -1 || m.BlockSize != 32 || m.Policy != "round-robin" || m.Alpha != 2 || m.Disagg != "never" || m.Tokenizer == nil {
		t.Errorf("code %d (%s), settings %+v", code, stderr.String(), m)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("models:\n  a:\n    router:\n      polcy: kv\n"), 0o600)
	stderr.Reset()
	if _, code := parseUpFlags([]string{"--config", bad}, Env{Stderr: &stderr}); code != ExitUsage || !strings.Contains(stderr.String(), bad+":4: models.a.router.polcy") {
		t.Errorf("bad config: code %d, stderr %q", code, stderr.String())
	}
}

// up --model a,b splits its workers and checks every model and adapter.
func TestUpFleetFlags(t *testing.T) {
	var stderr bytes.Buffer
	u, code := parseUpFlags([]string{"--model", "qwen3-0.6b,llama-3.1-8b", "--workers", "3,1", "--lora-modules", "x=llama-3.1-8b"}, Env{Stderr: &stderr})
	if code != -1 || len(u.models) != 2 || u.split[0] != 3 || u.split[1] != 1 || u.workers != 4 || len(u.adapters) != 1 {
		t.Errorf("code %d (%s): models %q split %v workers %d adapters %v", code, stderr.String(), u.models, u.split, u.workers, u.adapters)
	}
	if u, code := parseUpFlags([]string{"--model", "qwen3-0.6b,llama-3.1-8b", "--workers", "5"}, Env{Stderr: &stderr}); code != -1 || u.split[0] != 3 || u.split[1] != 2 {
		t.Errorf("even split: code %d split %v", code, u.split)
	}
	for _, args := range [][]string{
		{"--model", "qwen3-0.6b,llama-3.1-8b", "--workers", "1,1,1"},
		{"--model", "qwen3-0.6b,llama-3.1-8b", "--workers", "1"},
		{"--model", "qwen3-0.6b,nope"},
		{"--model", "qwen3-0.6b,qwen3-0.6b"},
		{"--model", "qwen3-0.6b", "--lora-modules", "x=llama-3.1-8b"},
	} {
		stderr.Reset()
		if _, code := parseUpFlags(args, Env{Stderr: &stderr}); code != ExitUsage {
			t.Errorf("%q: code %d, want %d", args, code, ExitUsage)
		}
	}
}
