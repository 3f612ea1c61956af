package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// OverloadStream is one class of closed-loop clients in the overload
// scenario: Streams clients of Tenant, each sending requests of Priority
// one after another.
type OverloadStream struct {
	Tenant   string `json:"tenant"`
	Key      string `json:"-"` // the tenant's API key
	Priority string `json:"priority"`
	Streams  int    `json:"streams"`
}

// ParseOverloadMix parses "tenant:priority:streams,..." (e.g.
// "alpha:standard:24,alpha:critical:4"), with keys naming each tenant's
// API key ("alpha=sk-a,beta=sk-b"; a tenant without one sends none).
func ParseOverloadMix(mix, keys string) ([]OverloadStream, error) {
	km := map[string]string{}
	for _, kv := range strings.Split(keys, ",") {
		if kv == "" {
			continue
		}
		t, k, ok := strings.Cut(kv, "=")
		if !ok || t == "" {
			return nil, fmt.Errorf("bench: --keys %q: want tenant=key,...", kv)
		}
		km[t] = k
	}
	var out []OverloadStream
	for _, part := range strings.Split(mix, ",") {
		f := strings.Split(part, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("bench: --mix %q: want tenant:priority:streams", part)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bench: --mix %q: streams must be a positive number", part)
		}
		switch f[1] {
		case "critical", "standard", "sheddable":
		default:
			return nil, fmt.Errorf("bench: --mix %q: priority must be critical, standard or sheddable", part)
		}
		out = append(out, OverloadStream{Tenant: f[0], Key: km[f[0]], Priority: f[1], Streams: n})
	}
	return out, nil
}

// DefaultOverloadMix is the mix: tenant alpha with 24 standard and
// 4 critical streams, beta with 6 standard and 8 sheddable.
const DefaultOverloadMix = "alpha:standard:24,alpha:critical:4,beta:standard:6,beta:sheddable:8"

// OverloadConfig configures RunOverload.
type OverloadConfig struct {
	URL      string
	Model    string
	Mix      []OverloadStream
	Duration time.Duration
	// PromptWords and MaxTokens size each request; prompts are unique
	// (seeded) so the prefix cache does not flatter anyone.
	PromptWords int
	MaxTokens   int
	// HonorRetryAfter: a refused client waits Retry-After before its next
	// request, as a well-behaved client does; otherwise it retries at once.
	HonorRetryAfter bool
	Timeout         time.Duration // per request
	Seed            int64
}

// OverloadClass is the outcome of one (tenant, priority) class.
type OverloadClass struct {
	Tenant   string `json:"tenant"`
	Priority string `json:"priority"`
	Streams  int    `json:"streams"`
	Sent     int    `json:"sent"`
	Served   int    `json:"served"`
	// Shed are 429 answers; ShedWithRetryAfter those carrying Retry-After.
	Shed               int            `json:"shed"`
	ShedWithRetryAfter int            `json:"shed_with_retry_after"`
	ShedLimits         map[string]int `json:"shed_limits"` // by x-switchyard-limit
	Unavailable        int            `json:"unavailable"` // 503
	ServerErrors       int            `json:"server_errors"`
	OtherErrors        int            `json:"other_errors"` // transport, other 4xx, broken streams
	// Abandoned are requests still waiting for an answer when the run
	// ended: the client gave up on them. Counting them as served would
	// credit the tenant with the longest queue.
	Abandoned    int     `json:"abandoned"`
	TTFTP50      float64 `json:"ttft_p50_s"`
	TTFTP99      float64 `json:"ttft_p99_s"`
	ServedTokens int     `json:"served_tokens"` // completion tokens
	// TokenShare is ServedTokens over all classes' served tokens.
	TokenShare float64 `json:"token_share"`

	ttfts []float64
}

// OverloadReport is the result of RunOverload.
type OverloadReport struct {
	URL       string          `json:"url"`
	DurationS float64         `json:"duration_s"`
	MaxTokens int             `json:"max_tokens"`
	Classes   []OverloadClass `json:"classes"`
	// Tenants sums the classes of each tenant, Priority "all".
	Tenants []OverloadClass `json:"tenants"`
}

// Class returns the class of tenant and priority, or nil.
func (r *OverloadReport) Class(tenant, priority string) *OverloadClass {
	for i := range r.Classes {
		if r.Classes[i].Tenant == tenant && r.Classes[i].Priority == priority {
			return &r.Classes[i]
		}
	}
	return nil
}

// RunOverload runs the mix's closed-loop clients for cfg.Duration and
// reports each class. Requests still running at the end are waited for
// and counted.
func RunOverload(ctx context.Context, cfg OverloadConfig, progress io.Writer) (*OverloadReport, error) {
	if cfg.Duration <= 0 || len(cfg.Mix) == 0 || cfg.MaxTokens <= 0 {
		return nil, fmt.Errorf("bench: overload: need a duration, a mix and max tokens")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	defer client.CloseIdleConnections()
	classes := make([]OverloadClass, len(cfg.Mix))
	var mu sync.Mutex // guards classes
	end := time.Now().Add(cfg.Duration)
	var wg sync.WaitGroup
	for ci, s := range cfg.Mix {
		classes[ci] = OverloadClass{Tenant: s.Tenant, Priority: s.Priority, Streams: s.Streams, ShedLimits: map[string]int{}}
		for k := range s.Streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(ci*1000+k)))
				for time.Now().Before(end) && ctx.Err() == nil {
					res := overloadRequest(ctx, client, cfg, s, rng, end)
					mu.Lock()
					c := &classes[ci]
					c.Sent++
					switch {
					case res.abandoned:
						c.Abandoned++
					case res.err == nil && res.status == http.StatusOK:
						c.Served++
						c.ServedTokens += res.tokens
						c.ttfts = append(c.ttfts, res.ttft.Seconds())
					case res.status == http.StatusTooManyRequests:
						c.Shed++
						if res.retryAfter > 0 {
							c.ShedWithRetryAfter++
						}
						c.ShedLimits[res.limit]++
					case res.status == http.StatusServiceUnavailable:
						c.Unavailable++
					case res.status >= 500:
						c.ServerErrors++
					default:
						c.OtherErrors++
					}
					mu.Unlock()
					if res.status == http.StatusTooManyRequests || res.status == http.StatusServiceUnavailable {
						wait := 50 * time.Millisecond // never spin on refusals
						if cfg.HonorRetryAfter && res.retryAfter > 0 {
							wait = res.retryAfter
						}
						select {
						case <-time.After(min(wait, time.Until(end))):
						case <-ctx.Done():
						}
					}
				}
			}()
		}
	}
	if progress != nil {
		fmt.Fprintf(progress, "bench overload: %d streams for %v against %s...\n", streams(cfg.Mix), cfg.Duration, cfg.URL)
	}
	wg.Wait()
	rep := &OverloadReport{URL: cfg.URL, DurationS: cfg.Duration.Seconds(), MaxTokens: cfg.MaxTokens, Classes: classes}
	rep.finish()
	return rep, ctx.Err()
}

func streams(mix []OverloadStream) int {
	n := 0
	for _, s := range mix {
		n += s.Streams
	}
	return n
}

// finish computes quantiles, shares and the per-tenant sums.
func (r *OverloadReport) finish() {
	total := 0
	for _, c := range r.Classes {
		total += c.ServedTokens
	}
	byTenant := map[string]*OverloadClass{}
	var order []string
	for i := range r.Classes {
		c := &r.Classes[i]
		sort.Float64s(c.ttfts)
		c.TTFTP50, c.TTFTP99 = percentileOr0(c.ttfts, 50), percentileOr0(c.ttfts, 99)
		if total > 0 {
			c.TokenShare = float64(c.ServedTokens) / float64(total)
		}
		t := byTenant[c.Tenant]
		if t == nil {
			t = &OverloadClass{Tenant: c.Tenant, Priority: "all", ShedLimits: map[string]int{}}
			byTenant[c.Tenant] = t
			order = append(order, c.Tenant)
		}
		t.Streams += c.Streams
		t.Sent += c.Sent
		t.Served += c.Served
		t.Shed += c.Shed
		t.ShedWithRetryAfter += c.ShedWithRetryAfter
		for k, v := range c.ShedLimits {
			t.ShedLimits[k] += v
		}
		t.Unavailable += c.Unavailable
		t.ServerErrors += c.ServerErrors
		t.OtherErrors += c.OtherErrors
		t.Abandoned += c.Abandoned
		t.ServedTokens += c.ServedTokens
		t.TokenShare += c.TokenShare
		t.ttfts = append(t.ttfts, c.ttfts...)
	}
	for _, n := range order {
		t := byTenant[n]
		slices.Sort(t.ttfts)
		t.TTFTP50, t.TTFTP99 = percentileOr0(t.ttfts, 50), percentileOr0(t.ttfts, 99)
		r.Tenants = append(r.Tenants, *t)
	}
}

// percentileOr0 is Percentile, 0 for no sample (JSON has no NaN).
func percentileOr0(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return Percentile(sorted, p)
}

// WriteOverloadTable writes the report as a table, one row per class and
// per tenant.
func WriteOverloadTable(w io.Writer, r *OverloadReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\tpriority\tstreams\tsent\tserved\tshed 429\twith Retry-After\t503\t5xx\tother\tabandoned\tTTFT p50 s\tTTFT p99 s\tserved tokens\tshare\t")
	rows := append(slices.Clone(r.Classes), r.Tenants...)
	for _, c := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%d\t%.3f\t\n", c.Tenant, c.Priority, c.Streams, c.Sent, c.Served,
			c.Shed, c.ShedWithRetryAfter, c.Unavailable, c.ServerErrors, c.OtherErrors, c.Abandoned, c.TTFTP50, c.TTFTP99, c.ServedTokens, c.TokenShare)
	}
	return tw.Flush()
}

// WriteOverloadJSON writes the report as indented JSON.
func WriteOverloadJSON(w io.Writer, r *OverloadReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

type overloadResult struct {
	abandoned  bool
	status     int
	err        error
	ttft       time.Duration
	tokens     int
	retryAfter time.Duration
	limit      string
}

// overloadWords are what unique prompts are made of.
var overloadWords = strings.Fields("the quick brown fox jumps over a lazy dog while seven tired engineers route tokens across busy workers under load")

// overloadRequest sends one request; one still without response headers
// (queued, not yet admitted) at end is abandoned.
func overloadRequest(ctx context.Context, client *http.Client, cfg OverloadConfig, s OverloadStream, rng *rand.Rand, end time.Time) overloadResult {
	var sb strings.Builder
	for i := range cfg.PromptWords {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(overloadWords[rng.IntN(len(overloadWords))])
	}
	body, _ := json.Marshal(map[string]any{
		"model": cfg.Model, "max_tokens": cfg.MaxTokens, "stream": true, "stream_options": map[string]bool{"include_usage": true},
		"messages": []map[string]string{{"role": "user", "content": sb.String()}},
	})
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var answered, abandoned atomic.Bool
	giveUp := time.AfterFunc(time.Until(end), func() {
		if !answered.Load() {
			abandoned.Store(true)
			cancel()
		}
	})
	defer giveUp.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(cfg.URL, "/")+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return overloadResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-switchyard-priority", s.Priority)
	if s.Key != "" {
		req.Header.Set("Authorization", "Bearer "+s.Key)
	}
	start := time.Now()
	resp, err := client.Do(req)
	answered.Store(true)
	if err != nil {
		return overloadResult{err: err, abandoned: abandoned.Load()}
	}
	defer resp.Body.Close()
	res := overloadResult{status: resp.StatusCode, limit: resp.Header.Get("x-switchyard-limit")}
	if resp.StatusCode != http.StatusOK {
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && ra >= 0 {
			res.retryAfter = time.Duration(ra) * time.Second
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		res.err = fmt.Errorf("status %d", resp.StatusCode)
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error any `json:"error"`
		}
		if json.Unmarshal([]byte(line), &ch) != nil {
			continue
		}
		if ch.Error != nil {
			res.err = fmt.Errorf("error event in the stream: %v", ch.Error)
		}
		if res.ttft == 0 && len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			res.ttft = time.Since(start)
		}
		if ch.Usage != nil {
			res.tokens = ch.Usage.CompletionTokens
		}
	}
	if res.err == nil && (!done || sc.Err() != nil) {
		res.err = fmt.Errorf("stream ended without [DONE]: %v", sc.Err())
	}
	if res.err != nil {
		res.status = 0 // a broken stream is no success
	}
	return res
}
