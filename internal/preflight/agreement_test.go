package preflight

import (
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/preflight/preflighttest"
)

func TestAgreementCheck(t *testing.T) {
	t.Run("healthy", func(t *testing.T) {
		f := preflighttest.New(t, preflighttest.Config{Workers: twoWorkers()})
		rep, out := run(t, testConfig(f.URL))
		c := check(t, rep, CheckAgreement)
		if c.Status != Pass || len(c.Agreement) != 2 {
			t.Fatalf("status %s, %d probes: %+v", c.Status, len(c.Agreement), c)
		}
		for _, p := range c.Agreement {
			if p.Requests != agreementRequests || p.Blind+p.Stale != 0 || p.CachedTokens == 0 || p.PredictedTokens < p.CachedTokens {
				t.Errorf("probe %+v, want %d agreeing judged chats", p, agreementRequests)
			}
		}
		if !strings.Contains(out, "Index agreement") || !strings.Contains(out, "index-agreement") {
			t.Errorf("table lacks the index-agreement check:\n%s", out)
		}
	})
	t.Run("tokenizer mismatch is blind", func(t *testing.T) {
		f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2", Tokenizer: "differs"}}})
		rep, _ := run(t, testConfig(f.URL))
		c := check(t, rep, CheckAgreement)
		if c.Status != Fail || !rep.Failed() {
			t.Fatalf("status %s, verdict %s", c.Status, rep.Verdict)
		}
		joined := strings.Join(c.Problems, "\n")
		if !strings.Contains(joined, "w2: index blind on 8 of 8 repeated-prefix chats") || !strings.Contains(joined, "where the index predicted 0") ||
			!strings.Contains(joined, "tokenizes differently") || strings.Contains(joined, "w1:") {
			t.Errorf("problems:\n%s", joined)
		}
	})
	t.Run("lost events are blind", func(t *testing.T) {
		f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1", Events: "silent"}}})
		rep, _ := run(t, testConfig(f.URL))
		c := check(t, rep, CheckAgreement)
		if c.Status != Fail || !strings.Contains(strings.Join(c.Problems, "\n"), "w1: index blind on 8 of 8") {
			t.Errorf("status %s, problems %q", c.Status, c.Problems)
		}
	})
	t.Run("an engine without cached_tokens is not judged", func(t *testing.T) {
		f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1", NoCachedTokens: true}}})
		rep, _ := run(t, testConfig(f.URL))
		c := check(t, rep, CheckAgreement)
		if c.Status != Warn || len(c.Agreement) != 1 || c.Agreement[0].Unreported != agreementRequests || c.Agreement[0].Requests != 0 ||
			!strings.Contains(strings.Join(c.Problems, "\n"), "--enable-prompt-tokens-details") {
			t.Errorf("status %s, probes %+v, problems %q", c.Status, c.Agreement, c.Problems)
		}
	})
	t.Run("an engine that serves nothing it stored is stale", func(t *testing.T) {
		f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1", NoCache: true}, {ID: "w2"}}})
		rep, _ := run(t, testConfig(f.URL))
		c := check(t, rep, CheckAgreement)
		joined := strings.Join(c.Problems, "\n")
		if c.Status != Fail || !strings.Contains(joined, "w1: index stale on 8 of 8") || !strings.Contains(joined, "removals") || strings.Contains(joined, "w2:") {
			t.Errorf("status %s, problems:\n%s", c.Status, joined)
		}
	})
}

func TestAgreementVerdict(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		predicted, cached, prompt int
		blind, stale              bool
	}{
		{"agree", 64, 64, 100, false, false},
		{"last token of a whole prompt recomputed", 64, 48, 64, false, false},
		{"blind", 0, 64, 100, true, false},
		{"stale", 64, 32, 100, false, true},
		{"under a block", 64, 60, 100, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, s := agreementVerdict(tc.predicted, tc.cached, tc.prompt, 16)
			if b != tc.blind || s != tc.stale {
				t.Errorf("agreementVerdict(%d, %d, %d) = %v, %v; want %v, %v", tc.predicted, tc.cached, tc.prompt, b, s, tc.blind, tc.stale)
			}
		})
	}
}
