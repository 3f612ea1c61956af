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
			Pending         int    `json:"pending"`
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

// settledAgreement is readAgreement once the frontend has judged every
// response: a blind one waits a grace (seconds) for its KV events first.
func settledAgreement(t testing.TB, url string) agreementHealth {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := readAgreement(t, url)
		pending := 0
		for _, w := range h.Workers {
			pending += w.Agreement.Pending
		}
		if pending == 0 {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d responses still waiting to be judged after 20s: %+v", pending, h)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
	tripped := map[string]bool{}
	for i := 1; i <= 20 && len(tripped) == 0; i++ {
		if r := chat(ctx, c.url, fmt.Sprintf("%sQuestion %d: which track?", sharedPrefix, i), 4); r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		h := readAgreement(t, c.url)
		if i == 20 {
			h = settledAgreement(t, c.url)
		}
		for _, w := range h.Workers {
			if w.Events.State == "inconsistent" {
				tripped[w.ID] = true
				t.Logf("request %d: %s inconsistent: %s (agreement %+v)", i, w.ID, w.Events.Cause, w.Agreement)
				if !w.Agreement.Inconsistent || !strings.Contains(w.Events.Cause, "index blind: the engine served") ||
					!strings.Contains(w.Events.Cause, "where the index predicted 0") || w.Agreement.Blind < 4 || w.Agreement.PredictedTokens != 0 {
					t.Errorf("%s: cause %q, agreement %+v; want index blind with the index predicting 0", w.ID, w.Events.Cause, w.Agreement)
				}
			}
		}
	}
	if len(tripped) == 0 {
		t.Fatalf("no worker inconsistent after 20 repeated-prefix requests: %+v", readAgreement(t, c.url))
	}
	// The router now routes an inconsistent worker by the approximate
	// index: a repeat of its prefix goes back to it, credited from there.
	// (Both workers may trip at once: blind verdicts are judged together
	// once they have waited for their events.)
	sources := map[string]int{}
	for i := 21; i <= 28; i++ {
		r := chat(ctx, c.url, fmt.Sprintf("%sQuestion %d: which track?", sharedPrefix, i), 4)
		if r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		if tripped[r.worker] {
			sources[r.source]++
		}
	}
	if sources["approx"] == 0 {
		t.Errorf("requests to %v took their overlap from %v, want the approximate index", tripped, sources)
	}
	for w := range tripped {
		if !strings.Contains(metricsText(t, c.url), `switchyard_index_agreement{worker="`+w+`"}`) {
			t.Errorf("/metrics lacks switchyard_index_agreement for %s", w)
		}
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

// untilInconsistent sends up to n chats cycling over k shared prefixes and
// returns the first worker found inconsistent, its cause and the request
// it took; "" when none was.
func untilInconsistent(t *testing.T, url string, n, k int) (worker, cause string, at int) {
	t.Helper()
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		p := (i - 1) % k
		msg := fmt.Sprintf("Prefix %d. %sQuestion %d: which track?", p, strings.Repeat(fmt.Sprintf("The switchyard sorts the freight cars of train %d onto their tracks. ", p), 10), i)
		if r := chat(ctx, url, msg, 4); r.err != nil {
			t.Fatalf("request %d: %v", i, r.err)
		}
		h := readAgreement(t, url)
		if i == n {
			// The last request's verdicts, and any still waiting for
			// their events, are in.
			h = settledAgreement(t, url)
		}
		for _, w := range h.Workers {
			if w.Events.State == "inconsistent" {
				t.Logf("request %d: %s inconsistent: %s (agreement %+v)", i, w.ID, w.Events.Cause, w.Agreement)
				return w.ID, w.Events.Cause, i
			}
		}
	}
	return "", "", 0
}

// preflightFailsAgreement runs preflight and returns its index-agreement
// FAIL line, failing the test when there is none.
func preflightFailsAgreement(t *testing.T, url string) string {
	t.Helper()
	code, out, errOut := preflight(t, url, "--probe-tokens", "500")
	if code != 1 {
		t.Fatalf("preflight exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "FAIL index-agreement") {
			return l
		}
	}
	t.Fatalf("preflight did not fail index-agreement:\n%s", out)
	return ""
}

// TestLostEventsAreInconsistent: vLLM-wire engines behind bridges that
// never publish half their KV events, with no sequence gap (nothing on the
// wire shows it): the index is blind to the lost prefixes, and the
// engines' own cache reports give it away within 20 requests.
func TestLostEventsAreInconsistent(t *testing.T) {
	url := up(t, "--workers", "2", "--engine-wire", "vllm", "--kv-events-drop", "0.5")
	w, cause, at := untilInconsistent(t, url, 20, 3)
	if w == "" {
		t.Fatalf("no worker inconsistent after 20 requests with half the events lost: %+v", readAgreement(t, url))
	}
	if !strings.Contains(cause, "index blind") && !strings.Contains(cause, "bridge drift") {
		t.Errorf("request %d: %s's cause %q, want index blind (or the bridge's drift)", at, w, cause)
	}
	if line := preflightFailsAgreement(t, url); !strings.Contains(line, w) {
		t.Errorf("preflight's index-agreement FAIL %q does not name %s", line, w)
	}
}

// TestSkippedRemovalsAreInconsistent: engines that evict blocks without
// publishing BlockRemoved, with KV caches too small for the prefixes: the
// index keeps predicting what the engines no longer hold.
func TestSkippedRemovalsAreInconsistent(t *testing.T) {
	url := up(t, "--workers", "2", "--engine-wire", "vllm", "--kv-events-skip-removals", "--kv-blocks", "40")
	w, cause, at := untilInconsistent(t, url, 20, 8)
	if w == "" {
		t.Fatalf("no worker inconsistent after 20 requests with removals skipped: %+v", readAgreement(t, url))
	}
	if !strings.Contains(cause, "index stale: the index predicted") || !strings.Contains(cause, "missed block removals") {
		t.Errorf("request %d: %s's cause %q, want index stale", at, w, cause)
	}
	if line := preflightFailsAgreement(t, url); !strings.Contains(line, "stale") && !strings.Contains(line, "inconsistent") {
		t.Errorf("preflight's index-agreement FAIL %q says neither stale nor inconsistent", line)
	}
}

// TestSmallCacheWithRemovalsAgrees is the control of the test above: the
// same caches, the same load, removals published: no worker turns
// inconsistent, evictions notwithstanding.
func TestSmallCacheWithRemovalsAgrees(t *testing.T) {
	url := up(t, "--workers", "2", "--engine-wire", "vllm", "--kv-blocks", "40")
	if w, cause, at := untilInconsistent(t, url, 40, 8); w != "" {
		t.Errorf("request %d: %s inconsistent with removals published: %s", at, w, cause)
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
	for _, w := range settledAgreement(t, c.url).Workers {
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
