//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// agreementHealth is the part of /health the index-agreement tests read.
type agreementHealth struct {
	Workers []struct {
		ID     string `json:"id"`
		Events struct {
			State string `json:"state"`
			Cause string `json:"cause"`
		} `json:"events"`
		Agreement struct {
			Requests        int    `json:"requests"`
			PredictedTokens int    `json:"predicted_tokens"`
			CachedTokens    int    `json:"engine_cached_tokens"`
			Blind           int    `json:"blind"`
			Stale           int    `json:"stale"`
			Trips           int    `json:"trips"`
			Inconsistent    bool   `json:"inconsistent"`
			Cause           string `json:"cause"`
		} `json:"agreement"`
	} `json:"workers"`
}

func readAgreement(t testing.TB, url string) agreementHealth {
	t.Helper()
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	defer resp.Body.Close()
	var h agreementHealth
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	return h
}

// sharedPrefix is a long user message every request of a test starts with.
var sharedPrefix = strings.Repeat("The switchyard sorts the freight cars of many trains onto their tracks. ", 12)

// TestTokenizerMismatchIsInconsistent: the frontend hashes prompts as
// cl100k tokenizes them, the workers compute (and report in their KV
// events) what Qwen3's tokenizer makes of them. Every repeated prefix is
// served from the engines' caches and never predicted by the index, which
// the health signals used to hide. Within 20 requests a worker is
// inconsistent with a cause that has the figures, its requests are routed
// by the approximate index, and preflight FAILs on index-agreement.
func TestTokenizerMismatchIsInconsistent(t *testing.T) {
	nats := startNATS(t)
	c := startCluster(t, nats.URL(), 2, []string{"--tokenizer", "cl100k"}, []string{"--tokenizer", qwen3Tokenizer(t)})
	ctx := context.Background()
	var tripped string
	for i := 1; i <= 20 && tripped == ""; i++ {
		if r := chat(ctx, c.url, fmt.Sprintf("%sQuestion %d: which track?", sharedPrefix, i), 4); r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		for _, w := range readAgreement(t, c.url).Workers {
			if w.Events.State == "inconsistent" {
				tripped = w.ID
				t.Logf("request %d: %s inconsistent: %s (agreement %+v)", i, w.ID, w.Events.Cause, w.Agreement)
				if !w.Agreement.Inconsistent || !strings.Contains(w.Events.Cause, "index blind: the engine served") ||
					!strings.Contains(w.Events.Cause, "where the index predicted 0") || w.Agreement.Blind < 8 || w.Agreement.PredictedTokens != 0 {
					t.Errorf("%s: cause %q, agreement %+v; want index blind with the index predicting 0", w.ID, w.Events.Cause, w.Agreement)
				}
			}
		}
	}
	if tripped == "" {
		t.Fatalf("no worker inconsistent after 20 repeated-prefix requests: %+v", readAgreement(t, c.url))
	}
	// The router now routes the inconsistent worker by the approximate
	// index: a repeat of its prefix goes back to it, credited from there.
	sources := map[string]int{}
	for i := 21; i <= 28; i++ {
		r := chat(ctx, c.url, fmt.Sprintf("%sQuestion %d: which track?", sharedPrefix, i), 4)
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		if r.worker == tripped {
			sources[r.source]++
		}
	}
	if sources["approx"] == 0 {
		t.Errorf("requests to %s took their overlap from %v, want the approximate index", tripped, sources)
	}
	if !strings.Contains(metricsText(t, c.url), `switchyard_index_agreement{worker="`+tripped+`"}`) {
		t.Errorf("/metrics lacks switchyard_index_agreement for %s", tripped)
	}

	code, out, errOut := preflight(t, c.url, "--probe-tokens", "500")
	if code != 1 {
		t.Fatalf("preflight exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "FAIL index-agreement") {
			line = l
		}
	}
	if !strings.Contains(line, "index blind") || !strings.Contains(line, "tokenizes differently") {
		t.Errorf("preflight's index-agreement problem line %q should say blind, tokenizer:\n%s", line, out)
	}
}

// TestHealthyClusterAgrees: the same deployment with one tokenizer
// everywhere, under a burst of concurrent repeated-prefix chats, agrees
// and never turns inconsistent.
func TestHealthyClusterAgrees(t *testing.T) {
	nats := startNATS(t)
	c := startCluster(t, nats.URL(), 2, []string{"--tokenizer", "cl100k"}, []string{"--tokenizer", "cl100k"})
	lg := startLoad(c.url, 6, 240, 4)
	eventually(t, 2*time.Minute, "240 requests sent", func() bool {
		lg.mu.Lock()
		defer lg.mu.Unlock()
		return len(lg.results) >= 240
	})
	for _, r := range lg.finish() {
		if r.err != nil {
			t.Fatalf("request: %v", r.err)
		}
	}
	judged := 0
	for _, w := range readAgreement(t, c.url).Workers {
		t.Logf("%s: %+v", w.ID, w.Agreement)
		judged += w.Agreement.Requests
		if w.Agreement.Trips != 0 || w.Events.State != "healthy" {
			t.Errorf("%s: events %s (%s), %d trips", w.ID, w.Events.State, w.Events.Cause, w.Agreement.Trips)
		}
	}
	if judged == 0 {
		t.Errorf("no response judged: the load shares no prefix, or the engines report no cached tokens")
	}
}

func metricsText(t testing.TB, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}
