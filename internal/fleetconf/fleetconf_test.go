package fleetconf

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "switchyard.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoad(t *testing.T) {
	p := write(t, `models:
  qwen3-0.6b:
    tokenizer: cl100k
    block_size: 32
    router:
      policy: round-robin
    disagg: never
  llama-3.1-8b:
    router:
      alpha: 2
`)
	f, err := Load(p, func(string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	q, l := f.Models["qwen3-0.6b"], f.Models["llama-3.1-8b"]
	if q.BlockSize != 32 || q.Tokenizer != "cl100k" || q.Router.Policy != "round-robin" || q.Disagg != "never" || l.Router.Alpha != 2 || l.BlockSize != 0 {
		t.Errorf("decoded %+v and %+v", q, l)
	}
}

// Every refusal names the file, the line and the key.
func TestLoadRefuses(t *testing.T) {
	tests := []struct {
		name, text string
		want       string // file:line: key
	}{
		{"unknown key", "models:\n  a:\n    block_sise: 16\n", ":3: models.a.block_sise"},
		{"wrong type", "models:\n  a:\n    block_size: big\n", ":3: models.a.block_size"},
		{"block size range", "models:\n  a:\n    block_size: 4096\n", ":3: models.a.block_size"},
		{"policy", "models:\n  a:\n    router:\n      policy: fastest\n", ":4: models.a.router.policy"},
		{"alpha", "models:\n  a:\n    router:\n      alpha: -1\n", ":4: models.a.router.alpha"},
		{"disagg", "models:\n  b: {}\n  a:\n    disagg: sometimes\n", ":4: models.a.disagg"},
		{"tokenizer", "models:\n  a:\n    tokenizer: nowhere/none\n", ":3: models.a.tokenizer"},
		{"no models", "models: {}\n", ":1: models"},
		{"top-level typo", "model:\n  a: {}\n", ":1: model"},
	}
	for _, tc := range tests {
		p := write(t, tc.text)
		_, err := Load(p, func(spec string) error {
			if spec == "nowhere/none" {
				return errors.New("not found")
			}
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), p+tc.want) {
			t.Errorf("%s: error %v, want one at %s%s", tc.name, err, p, tc.want)
		}
	}
}
