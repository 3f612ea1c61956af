//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// overloadTenants are the tenants of the overload tests: alpha may send
// critical requests, beta at most standard; equal weights.
const overloadTenants = `tenants:
  - name: alpha
    key: sk-alpha
    weight: 1
    max_priority: critical
  - name: beta
    key: sk-beta
    weight: 1
  - name: metered
    key: sk-metered
    requests_per_minute: 60
`

// overloadCluster is a frontend with its embedded NATS and workers, each a
// process of its own.
type overloadCluster struct {
	url     string
	nats    string
	workers map[string]*proc
}

// startOverloadCluster starts a frontend with the overload tenants and n
// simulated workers (w1..wn), and waits until all are routable.
func startOverloadCluster(t *testing.T, n int, frontendArgs, workerArgs []string) *overloadCluster {
	t.Helper()
	tenants := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(tenants, []byte(overloadTenants), 0o600); err != nil {
		t.Fatal(err)
	}
	fe, m := start(t, readyURL, append([]string{"frontend", "--http-addr", "127.0.0.1:0", "--nats-addr", "127.0.0.1:0", "--nats-auth=false",
		"--tenants", tenants}, frontendArgs...)...)
	c := &overloadCluster{url: m[1], workers: map[string]*proc{}}
	nm := natsLine.FindStringSubmatch(fe.output())
	if nm == nil {
		t.Fatalf("frontend did not print its NATS URL:\n%s", fe.output())
	}
	c.nats = nm[1]
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("w%d", i)
		p, _ := start(t, readyURL, append([]string{"worker", "--nats", c.nats, "--nats-insecure", "--id", id, "--http-addr", "127.0.0.1:0"}, workerArgs...)...)
		c.workers[id] = p
	}
	eventually(t, 30*time.Second, fmt.Sprintf("%d workers routable", n), func() bool {
		var h struct {
			Workers []struct {
				Events struct{ State string } `json:"events"`
			} `json:"workers"`
		}
		getJSON(t, c.url+"/health", &h)
		if len(h.Workers) != n {
			return false
		}
		for _, w := range h.Workers {
			if w.Events.State != "healthy" {
				return false
			}
		}
		return true
	})
	return c
}

// overloadClass is the part of bench overload's JSON report the test reads.
type overloadClass struct {
	Tenant             string  `json:"tenant"`
	Priority           string  `json:"priority"`
	Sent               int     `json:"sent"`
	Served             int     `json:"served"`
	Shed               int     `json:"shed"`
	ShedWithRetryAfter int     `json:"shed_with_retry_after"`
	Unavailable        int     `json:"unavailable"`
	ServerErrors       int     `json:"server_errors"`
	OtherErrors        int     `json:"other_errors"`
	Abandoned          int     `json:"abandoned"`
	TTFTP99            float64 `json:"ttft_p99_s"`
}

// TestOverloadMix: two workers of 4 slots each under the mix
// (alpha: 24 standard + 4 critical closed-loop streams; beta: 6 standard
// + 8 sheddable), about 5x what they can serve, for 20 s, driven by
// `switchyard bench overload` as its own process. Nothing fails with a
// 5xx; every critical request is served with TTFT p99 within 3 s; at
// least half of the sheddable requests are told 429 with Retry-After;
// beta's standard requests are served at least 0.75x as often as
// alpha's though alpha sends four times as many.
func TestOverloadMix(t *testing.T) {
	c := startOverloadCluster(t, 2, []string{"--max-inflight-per-worker", "4"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "bench", "overload", "--url", c.url, "--keys", "alpha=sk-alpha,beta=sk-beta",
		"--duration", "20s", "--max-tokens", "64", "--prompt-words", "200", "--json", "-")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench overload: %v\n%s", err, stderr.String())
	}
	var rep struct {
		Classes []overloadClass `json:"classes"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("bench overload JSON: %v\n%s", err, out)
	}
	classes := map[string]overloadClass{}
	for _, cl := range rep.Classes {
		classes[cl.Tenant+"/"+cl.Priority] = cl
		t.Logf("%s/%s: sent %d served %d shed %d (with Retry-After %d) 503 %d 5xx %d other %d abandoned %d TTFT p99 %.3fs",
			cl.Tenant, cl.Priority, cl.Sent, cl.Served, cl.Shed, cl.ShedWithRetryAfter, cl.Unavailable, cl.ServerErrors, cl.OtherErrors, cl.Abandoned, cl.TTFTP99)
		if cl.Unavailable+cl.ServerErrors+cl.OtherErrors > 0 {
			t.Errorf("%s/%s: %d 503, %d other 5xx, %d other failures: want none", cl.Tenant, cl.Priority, cl.Unavailable, cl.ServerErrors, cl.OtherErrors)
		}
	}
	crit := classes["alpha/critical"]
	if crit.Served == 0 || crit.Shed > 0 || crit.TTFTP99 > 3 {
		t.Errorf("critical: served %d, shed %d, TTFT p99 %.3fs: want all served within 3 s", crit.Served, crit.Shed, crit.TTFTP99)
	}
	shed := classes["beta/sheddable"]
	if shed.Sent == 0 || 2*shed.ShedWithRetryAfter < shed.Sent {
		t.Errorf("sheddable: %d of %d refused with 429 and Retry-After, want at least half", shed.ShedWithRetryAfter, shed.Sent)
	}
	a, b := classes["alpha/standard"].Served, classes["beta/standard"].Served
	if a == 0 || float64(b) < 0.75*float64(a) {
		t.Errorf("standard served: beta %d, alpha %d (%.2f): want beta at least 0.75x alpha with equal weights", b, a, float64(b)/float64(max(a, 1)))
	}
	t.Logf("measured: critical %d/%d served, TTFT p99 %.3fs; sheddable refused with Retry-After %d/%d (%.0f%%); beta:alpha standard served %d:%d = %.2f",
		crit.Served, crit.Sent-crit.Abandoned, crit.TTFTP99, shed.ShedWithRetryAfter, shed.Sent, 100*float64(shed.ShedWithRetryAfter)/float64(max(shed.Sent, 1)), b, a, float64(b)/float64(max(a, 1)))
}

// call sends one non-streaming completion with key and returns the
// response (body read) and its usage's cached tokens.
func call(t *testing.T, url, key, prompt string, maxTokens int) (*http.Response, []byte, int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "qwen3-0.6b", "prompt": prompt, "max_tokens": maxTokens})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/completions: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var u struct {
		Usage struct {
			Details *struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	_ = json.Unmarshal(b, &u)
	cached := 0
	if u.Usage.Details != nil {
		cached = u.Usage.Details.Cached
	}
	return resp, b, cached
}

// TestTenantRateLimit: a tenant at 60 requests per minute sends a burst of
// 70: 60 pass, plus at most one per second the burst took (the bucket
// refills at 1/s), and every refusal is a 429 with Retry-After and
// OpenAI's x-ratelimit headers.
func TestTenantRateLimit(t *testing.T) {
	c := startOverloadCluster(t, 1, nil, nil)
	const burst = 70
	type res struct {
		code int
		h    http.Header
		body []byte
	}
	results := make([]res, burst)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, b, _ := call(t, c.url, "sk-metered", "hi "+strconv.Itoa(i), 1)
			results[i] = res{resp.StatusCode, resp.Header, b}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	ok := 0
	for _, r := range results {
		switch r.code {
		case http.StatusOK:
			ok++
			if r.h.Get("x-ratelimit-limit-requests") != "60" || r.h.Get("x-ratelimit-remaining-requests") == "" {
				t.Errorf("200 without the x-ratelimit headers: %v", r.h)
			}
		case http.StatusTooManyRequests:
			if got := r.h.Get("x-ratelimit-limit-requests"); got != "60" {
				t.Errorf("429: x-ratelimit-limit-requests %q, want 60", got)
			}
			if got := r.h.Get("x-ratelimit-remaining-requests"); got != "0" {
				t.Errorf("429: x-ratelimit-remaining-requests %q, want 0", got)
			}
			if d, err := time.ParseDuration(r.h.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > time.Minute {
				t.Errorf("429: x-ratelimit-reset-requests %q, want a duration in (0, 1m]", r.h.Get("x-ratelimit-reset-requests"))
			}
			if ra, err := strconv.Atoi(r.h.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("429: Retry-After %q, want whole seconds >= 1", r.h.Get("Retry-After"))
			}
			if !bytes.Contains(r.body, []byte("requests_per_minute")) || !bytes.Contains(r.body, []byte(`"type":"rate_limit_error"`)) {
				t.Errorf("429 body does not name the limit in an OpenAI error: %s", r.body)
			}
		default:
			t.Errorf("status %d: %s", r.code, r.body)
		}
	}
	refill := int(took.Seconds()) + 1
	if ok < 60 || ok > 60+refill {
		t.Errorf("%d of %d passed in %v, want 60 plus at most %d refilled", ok, burst, took, refill)
	}
	t.Logf("burst of %d in %v: %d passed, %d refused", burst, took, ok, burst-ok)
}

// TestTenantCacheIsolation: with tenants, beta gets no cached tokens on a
// prompt alpha has cached, on the same worker, while alpha's repeat hits.
func TestTenantCacheIsolation(t *testing.T) {
	c := startOverloadCluster(t, 1, nil, nil)
	prompt := strings.Repeat("the tenants share one worker but never one cache entry. ", 40)
	if resp, b, _ := call(t, c.url, "sk-alpha", prompt, 4); resp.StatusCode != 200 {
		t.Fatalf("alpha: %d %s", resp.StatusCode, b)
	}
	_, _, again := call(t, c.url, "sk-alpha", prompt, 4)
	if again == 0 {
		t.Fatalf("alpha's repeat got 0 cached tokens: the check below could not fail")
	}
	resp, b, beta := call(t, c.url, "sk-beta", prompt, 4)
	if resp.StatusCode != 200 || beta != 0 {
		t.Errorf("beta on alpha's prompt: status %d, %d cached tokens, want 0 (alpha's repeat had %d): %s", resp.StatusCode, beta, again, b)
	}
}

// TestDrainWorker: SIGTERM a worker while 16 clients stream through two
// workers. No request fails, the worker exits (0) within its drain
// timeout, and no request sent after the signal is served by it.
func TestDrainWorker(t *testing.T) {
	const drainTimeout = 20 * time.Second
	c := startOverloadCluster(t, 2, nil, []string{"--drain-timeout", drainTimeout.String()})
	type res struct {
		sent, done time.Time
		worker     string
		err        error
	}
	var mu sync.Mutex
	var results []res
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for k := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sent := time.Now()
				worker, err := streamOnce(c.url, fmt.Sprintf("client %d request %d: tell a long story", k, i), 256)
				mu.Lock()
				results = append(results, res{sent, time.Now(), worker, err})
				mu.Unlock()
			}
		}()
	}
	served := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if r.worker == id {
				n++
			}
		}
		return n
	}
	eventually(t, 30*time.Second, "both workers serving", func() bool { return served("w1") >= 3 && served("w2") >= 3 })
	w1 := c.workers["w1"]
	signalled := time.Now()
	if err := w1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w1.done:
	case <-time.After(drainTimeout + 10*time.Second):
		t.Fatalf("w1 did not exit within %v of SIGTERM", drainTimeout+10*time.Second)
	}
	exited := time.Since(signalled)
	if code := w1.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("w1 exited %d after SIGTERM, want 0", code)
	}
	if exited > drainTimeout {
		t.Errorf("w1 exited %v after SIGTERM, beyond its drain timeout %v", exited, drainTimeout)
	}
	if !strings.Contains(w1.output(), "drained: idle, exiting") {
		t.Errorf("w1 did not report a drain that finished its requests:\n%s", w1.output())
	}
	// Keep the load on a little after the exit: a forgotten route to w1
	// would fail here.
	mu.Lock()
	after := len(results)
	mu.Unlock()
	eventually(t, 60*time.Second, "16 more requests served after w1 left", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) >= after+16
	})
	close(stop)
	wg.Wait()
	failed, late, finished := 0, 0, 0
	for _, r := range results {
		if r.worker == "w1" && r.sent.Before(signalled) && r.done.After(signalled) {
			finished++ // in flight at the signal, finished by the drain
		}
		if r.err != nil {
			failed++
			t.Errorf("request sent at +%v failed: %v", r.sent.Sub(signalled), r.err)
		}
		if r.worker == "w1" && r.sent.After(signalled) {
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d requests sent after the SIGTERM were served by w1", late)
	}
	if finished == 0 {
		t.Errorf("no request was in flight on w1 at the SIGTERM: the drain was not exercised")
	}
	t.Logf("%d requests, %d failed; %d in flight on w1 at the SIGTERM finished; w1 exited %v after it", len(results), failed, finished, exited.Round(time.Millisecond))
}

// streamOnce sends one streaming chat request and reads it to [DONE]; it
// returns the worker that served it.
func streamOnce(url, prompt string, maxTokens int) (string, error) {
	body, _ := json.Marshal(map[string]any{"model": "qwen3-0.6b", "max_tokens": maxTokens, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-beta")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	worker := resp.Header.Get("x-switchyard-worker")
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return worker, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"error"`) {
			return worker, fmt.Errorf("error event: %s", line)
		}
		if line == "data: [DONE]" {
			return worker, nil
		}
	}
	return worker, fmt.Errorf("stream ended without [DONE]: %v", sc.Err())
}

// TestDrainBridge: SIGTERM a bridge while its engine streams. It shows as
// draining, deregisters only once the engine is idle, exits 0, and leaves
// the engine running.
func TestDrainBridge(t *testing.T) {
	c := startOverloadCluster(t, 0, nil, nil)
	ep := freeTCP(t)
	_, em := start(t, readyURL, "worker", "--id", "eng", "--http-addr", "127.0.0.1:0", "--kv-events-wire", "vllm", "--kv-events", ep)
	engineURL := em[1]
	br, _ := start(t, readyURL, "worker", "--engine", "vllm", "--id", "vllm-a", "--engine-url", engineURL, "--kv-events", ep,
		"--nats", c.nats, "--nats-insecure", "--drain-timeout", "30s")
	type drainHealth struct {
		Workers []struct {
			ID       string                 `json:"id"`
			Draining bool                   `json:"draining"`
			Events   struct{ State string } `json:"events"`
		} `json:"workers"`
	}
	eventually(t, 30*time.Second, "the bridged engine routable", func() bool {
		var h drainHealth
		getJSON(t, c.url+"/health", &h)
		return len(h.Workers) == 1 && h.Workers[0].Events.State == "healthy"
	})
	const streams = 6
	errs := make(chan error, streams)
	started := make(chan struct{}, streams)
	for k := range streams {
		go func() {
			started <- struct{}{}
			_, err := streamOnce(c.url, fmt.Sprintf("stream %d: a long answer please", k), 400)
			errs <- err
		}()
	}
	for range streams {
		<-started
	}
	eventually(t, 20*time.Second, "the streams running on the engine", func() bool {
		var h struct {
			Workers []struct {
				Load struct{ Running int } `json:"load"`
			} `json:"workers"`
		}
		getJSON(t, c.url+"/health", &h)
		return len(h.Workers) == 1 && h.Workers[0].Load.Running == streams
	})
	if err := br.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the frontend shows the bridged engine draining", func() bool {
		var h drainHealth
		getJSON(t, c.url+"/health", &h)
		return len(h.Workers) == 1 && h.Workers[0].Draining
	})
	// While it drains, the streams are still running: the bridge has not
	// left.
	select {
	case <-br.done:
		t.Fatalf("the bridge exited with streams still running on its engine")
	default:
	}
	for range streams {
		if err := <-errs; err != nil {
			t.Errorf("stream through the draining bridge: %v", err)
		}
	}
	select {
	case <-br.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the bridge did not exit within 30 s of its engine going idle")
	}
	if code := br.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("bridge exited %d, want 0", code)
	}
	// The engine is still up.
	resp, err := http.Get(engineURL + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("engine after the bridge drained: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestDrainFrontend: SIGTERM the frontend while it streams. /health says
// draining (503), a new request gets 503 with Retry-After, the streams in
// flight finish, and the frontend exits 0.
func TestDrainFrontend(t *testing.T) {
	tenants := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(tenants, []byte(overloadTenants), 0o600); err != nil {
		t.Fatal(err)
	}
	fe, m := start(t, readyURL, "up", "--http-addr", "127.0.0.1:0", "--workers", "1", "--tenants", tenants)
	url := m[1]
	const streams = 4
	errs := make(chan error, streams)
	for k := range streams {
		go func() {
			_, err := streamOnce(url, fmt.Sprintf("stream %d: a long answer please", k), 400)
			errs <- err
		}()
	}
	eventually(t, 20*time.Second, "the streams running", func() bool {
		var h struct {
			Workers []struct {
				InFlight int `json:"inflight"`
			} `json:"workers"`
		}
		getJSON(t, url+"/health", &h)
		return len(h.Workers) == 1 && h.Workers[0].InFlight == streams
	})
	if err := fe.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "/health says draining", func() bool {
		var h struct {
			Status string `json:"status"`
		}
		return getJSON(t, url+"/health", &h) == http.StatusServiceUnavailable && h.Status == "draining"
	})
	resp, _, _ := call(t, url, "sk-beta", "a new request while draining", 4)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("new request while draining: status %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	for range streams {
		if err := <-errs; err != nil {
			t.Errorf("stream through the draining frontend: %v", err)
		}
	}
	select {
	case <-fe.done:
	case <-time.After(40 * time.Second):
		t.Fatal("up did not exit after its streams finished")
	}
	if code := fe.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("up exited %d after SIGTERM, want 0", code)
	}
}

// TestReplicasShareSlots: two frontends sharing state, each with
// --max-inflight-per-worker 2, in front of one worker: together they keep
// about 2 requests on it, not 2 each, and no request fails. (The split
// between them is not fair: the replica whose request finishes admits its
// own next one before its peer hears of the finish.)
func TestReplicasShareSlots(t *testing.T) {
	login := newNATSLogin(t)
	_, fe1, natsURL := startFrontend(t, login, "", "--max-inflight-per-worker", "2")
	_, fe2, _ := startFrontend(t, login, natsURL, "--replica-id", "fe-2", "--max-inflight-per-worker", "2")
	start(t, readyURL, append([]string{"worker", "--nats", natsURL, "--registry-ttl", "2s", "--id", "w1", "--http-addr", "127.0.0.1:0", "--log-level", "warn"},
		login.workerArgs(t, "w1")...)...)
	for _, u := range []string{fe1, fe2} {
		eventually(t, 15*time.Second, "both frontends see the worker and a peer", func() bool {
			var h struct {
				Workers []any `json:"workers"`
			}
			getJSON(t, u+"/health", &h)
			var c struct {
				Replicas struct {
					Peers []struct{ ID string } `json:"peers"`
				} `json:"replicas"`
			}
			getJSON(t, u+"/admin/cluster", &c)
			return len(h.Workers) == 1 && len(c.Replicas.Peers) == 1
		})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	served := map[string]int{}
	var failures []error
	for _, u := range []string{fe1, fe2} {
		for k := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					_, err := streamOnce(u, fmt.Sprintf("%s client %d request %d", u, k, i), 64)
					mu.Lock()
					if err != nil {
						failures = append(failures, err)
					} else {
						served[u]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	// The engine's own count, from its load reports, every 100 ms for 8 s.
	var sum, n, most int
	for range 80 {
		var h struct {
			Workers []struct {
				Load struct{ Running, Waiting int } `json:"load"`
			} `json:"workers"`
		}
		getJSON(t, fe1+"/health", &h)
		if len(h.Workers) == 1 {
			r := h.Workers[0].Load.Running + h.Workers[0].Load.Waiting
			sum, n, most = sum+r, n+1, max(most, r)
		}
		time.Sleep(100 * time.Millisecond) // the sampling period, not synchronisation
	}
	close(stop)
	wg.Wait()
	mean := float64(sum) / float64(max(n, 1))
	t.Logf("engine requests over %d samples: mean %.2f, most %d; served %v", n, mean, most, served)
	if mean > 2.5 {
		t.Errorf("the worker held %.2f requests on average from two frontends with 2 slots each, want about 2 (4 if each filled its own)", mean)
	}
	for _, err := range failures {
		t.Errorf("request failed: %v", err)
	}
}
