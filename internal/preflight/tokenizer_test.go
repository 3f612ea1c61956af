package preflight

import (
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/preflight/preflighttest"
)

func TestTokenizerCheck(t *testing.T) {
	t.Run("equal", func(t *testing.T) {
		f := preflighttest.New(t, preflighttest.Config{Workers: twoWorkers()})
		rep, _ := run(t, testConfig(f.URL))
		c := check(t, rep, CheckTokenizer)
		if c.Status != Pass || len(c.Tokenizer) != 4 {
			t.Fatalf("status %s, %d probes: %+v", c.Status, len(c.Tokenizer), c)
		}
		for _, p := range c.Tokenizer {
			if p.FirstDiff != -1 || p.FrontendTokens == 0 || p.FrontendTokens != p.WorkerTokens {
				t.Errorf("probe %+v", p)
			}
		}
	})
	t.Run("a worker differs", func(t *testing.T) {
		f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2", Tokenizer: "differs"}}})
		rep, out := run(t, testConfig(f.URL))
		c := check(t, rep, CheckTokenizer)
		if c.Status != Fail || !rep.Failed() {
			t.Fatalf("status %s, verdict %s", c.Status, rep.Verdict)
		}
		joined := strings.Join(c.Problems, "\n")
		if !strings.Contains(joined, "w2: prompt: the frontend's token ids differ from the worker's at position 5") ||
			!strings.Contains(joined, "--tokenizer") || strings.Contains(joined, "w1:") {
			t.Errorf("problems:\n%s", joined)
		}
		if !strings.Contains(out, "Tokenizer") || !strings.Contains(out, "at 5:") {
			t.Errorf("table lacks the tokenizer section:\n%s", out)
		}
	})
	t.Run("a worker without /tokenize", func(t *testing.T) {
		f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2", Tokenizer: "missing"}}})
		rep, _ := run(t, testConfig(f.URL))
		c := check(t, rep, CheckTokenizer)
		if c.Status != Warn || !strings.Contains(strings.Join(c.Problems, "\n"), "w2: no POST /tokenize") {
			t.Fatalf("status %s, problems %q", c.Status, c.Problems)
		}
	})
}
