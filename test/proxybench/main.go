// Command proxybench measures what a hop in front of one engine worker adds
// to time to first byte: the worker straight, through nginx, and through the
// Switchyard frontend, side by side in one run. scripts/bench-proxy.sh starts
// the processes and runs it; see docs/proxy-bench.md.
//
// Every request is a streamed chat. For each case it sends request i to every
// target in turn (the order rotates with i, so no target always goes first),
// each target with its own prompt of the same shape, so that a cold case is
// cold on every target. A hop's cost is the per-request difference
// target_i − direct_i; the table quotes the median of those differences, and
// the ratio of Switchyard's median to nginx's. Differences of two percentiles
// are never reported: they can be negative, and mean nothing per request.
//
// With --go-floor it measures a fourth hop beside them: test/proxybench/goproxy,
// net/http's server and the frontend's upstream client with nothing between
// them. What it adds is the floor a Go proxy starts from on this machine; what
// the frontend adds beyond it is the frontend's own work.
//
// The throughput case runs 64 closed-loop streams against each target for a
// fixed time and compares requests per second. With --frontend-pid it also
// reads the frontend's CPU time from /proc while requests of the case go to
// the frontend alone (the frontend also indexes the KV events of the requests
// sent to the other targets, so the interleaved phase would overstate it) and
// reports CPU µs per request.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/internal/tokenizer/tokentest"
)

type target struct {
	name, url string
}

type config struct {
	targets     []target
	model       string
	requests    int
	warmup      int
	maxTokens   int
	cases       []string
	concurrency int
	duration    time.Duration
	frontendPID int
	label       string
	jsonOut     string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	direct := fs.String("direct", "", "the worker's base URL, e.g. http://127.0.0.1:18901")
	nginx := fs.String("nginx", "", "nginx in front of the same worker")
	sy := fs.String("switchyard", "", "the Switchyard frontend in front of the same worker")
	floor := fs.String("go-floor", "", "optional: test/proxybench/goproxy in front of the same worker (the Go floor)")
	fs.StringVar(&cfg.model, "model", "qwen3-0.6b", "model name in the requests")
	fs.IntVar(&cfg.requests, "requests", 300, "measured requests per target and case")
	fs.IntVar(&cfg.warmup, "warmup", 30, "unmeasured requests per target first (connections, caches)")
	fs.IntVar(&cfg.maxTokens, "max-tokens", 8, "tokens each answer streams")
	cases := fs.String("cases", "short,cold-1500,next-turn,throughput", "cases to run, in order")
	fs.IntVar(&cfg.concurrency, "concurrency", 64, "throughput case: concurrent streams")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "throughput case: time per target")
	fs.IntVar(&cfg.frontendPID, "frontend-pid", 0, "the frontend's pid: report its CPU per short request")
	fs.StringVar(&cfg.label, "label", "", "a suffix for the case names, e.g. the tokenizer")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write the results as JSON to this file (- for stdout)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	for _, t := range []target{{"direct", *direct}, {"nginx", *nginx}, {"switchyard", *sy}} {
		if t.url == "" {
			fmt.Fprintf(stderr, "proxybench: --%s URL is required\n", t.name)
			return 2
		}
		cfg.targets = append(cfg.targets, target{t.name, strings.TrimRight(t.url, "/")})
	}
	if *floor != "" {
		cfg.targets = append(cfg.targets, target{"go-floor", strings.TrimRight(*floor, "/")})
	}
	cfg.cases = strings.Split(*cases, ",")
	for _, c := range cfg.cases {
		if _, ok := caseBodies[c]; !ok && c != "throughput" {
			fmt.Fprintf(stderr, "proxybench: unknown case %q (want short, cold-1500, next-turn, throughput)\n", c)
			return 2
		}
	}
	res, err := measure(context.Background(), cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "proxybench: %v\n", err)
		return 1
	}
	printTable(stdout, res)
	if cfg.jsonOut != "" {
		out, _ := json.MarshalIndent(res, "", "  ")
		out = append(out, '\n')
		if cfg.jsonOut == "-" {
			stdout.Write(out)
		} else if err := os.WriteFile(cfg.jsonOut, out, 0o644); err != nil {
			fmt.Fprintf(stderr, "proxybench: %v\n", err)
			return 1
		}
	}
	return 0
}

// caseResult is one case's figures, in microseconds (latency cases) or
// requests per second (throughput).
type caseResult struct {
	Case         string  `json:"case"`
	Requests     int     `json:"requests,omitempty"`
	DirectP50    float64 `json:"direct_ttfb_p50_us,omitempty"`
	NginxAdds    float64 `json:"nginx_adds_p50_us,omitempty"`
	SYAdds       float64 `json:"switchyard_adds_p50_us,omitempty"`
	NginxAddsP90 float64 `json:"nginx_adds_p90_us,omitempty"`
	SYAddsP90    float64 `json:"switchyard_adds_p90_us,omitempty"`
	Ratio        float64 `json:"ratio"`
	DirectRPS    float64 `json:"direct_req_per_s,omitempty"`
	NginxRPS     float64 `json:"nginx_req_per_s,omitempty"`
	SYRPS        float64 `json:"switchyard_req_per_s,omitempty"`
	FloorAdds    float64 `json:"go_floor_adds_p50_us,omitempty"`
	FloorAddsP90 float64 `json:"go_floor_adds_p90_us,omitempty"`
	FloorRatio   float64 `json:"ratio_to_go_floor,omitempty"`
	FloorRPS     float64 `json:"go_floor_req_per_s,omitempty"`
	FrontendCPU  float64 `json:"frontend_cpu_us_per_request,omitempty"`
	// To the end of the stream rather than its first byte.
	NginxAddsWhole float64 `json:"nginx_adds_whole_stream_p50_us,omitempty"`
	SYAddsWhole    float64 `json:"switchyard_adds_whole_stream_p50_us,omitempty"`
	// The frontend's own stages, from its Server-Timing header.
	Stages []stageP50 `json:"switchyard_stages_p50_us,omitempty"`
}

type stageP50 struct {
	Name string  `json:"stage"`
	P50  float64 `json:"p50_us"`
}

// addStages adds the durations of a Server-Timing header
// ("read;dur=0.004, decode;dur=0.007") to stages, keeping the names in the
// order first seen.
func addStages(stages map[string][]time.Duration, order []string, header string) []string {
	for _, part := range strings.Split(header, ",") {
		name, dur, ok := strings.Cut(strings.TrimSpace(part), ";dur=")
		ms, err := strconv.ParseFloat(dur, 64)
		if !ok || err != nil {
			continue
		}
		if _, seen := stages[name]; !seen {
			order = append(order, name)
		}
		stages[name] = append(stages[name], time.Duration(ms*float64(time.Millisecond)))
	}
	return order
}

// caseBodies makes the i-th prompt of a case for target t. Prompts differ
// by target and by i, so nothing is served from an earlier request's cache
// except what the case means to be warm.
var caseBodies = map[string]func(i, t int) []message{
	"short": func(i, t int) []message {
		return []message{{"user", fmt.Sprintf("Hello! Say something short. (%d.%d)", i, t)}}
	},
	"cold-1500": func(i, t int) []message {
		return []message{{"user", tokentest.EnglishWords(1500, uint64(1e6+i*8+t))}}
	},
	// A next turn: the earlier turns are the same for every request of a
	// target (warm on the worker, and in the frontend's caches), the new
	// user message is new.
	"next-turn": func(i, t int) []message {
		seed := uint64(t * 100)
		return []message{
			{"system", tokentest.EnglishWords(100, seed+1)},
			{"user", tokentest.EnglishWords(600, seed+2)},
			{"assistant", tokentest.EnglishWords(300, seed+3)},
			{"user", tokentest.EnglishWords(300, seed+4)},
			{"assistant", tokentest.EnglishWords(100, seed+5)},
			{"user", tokentest.EnglishWords(100, uint64(2e6+i*8+t))},
		}
	},
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func body(model string, maxTokens int, msgs []message) []byte {
	b, _ := json.Marshal(struct {
		Model     string    `json:"model"`
		Messages  []message `json:"messages"`
		MaxTokens int       `json:"max_tokens"`
		Stream    bool      `json:"stream"`
	}{model, msgs, maxTokens, true})
	return b
}

func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        conns * 4,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}}
}

// stream sends one streamed chat and returns the time to the first byte of
// the answer's body; it reads the stream to its end.
func stream(ctx context.Context, c *http.Client, url string, b []byte) (ttfb, whole time.Duration, serverTiming string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return 0, 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.Peek(1); err != nil {
		return 0, 0, "", fmt.Errorf("%s: read first byte: %w", url, err)
	}
	ttfb = time.Since(start)
	rest, err := io.ReadAll(br) // to the end of the body: the last chunk's terminator
	whole = time.Since(start)
	if err != nil {
		return 0, 0, "", fmt.Errorf("%s: read stream: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, "", fmt.Errorf("%s: status %d: %.200s", url, resp.StatusCode, rest)
	}
	if !bytes.Contains(rest, []byte("[DONE]")) {
		return 0, 0, "", fmt.Errorf("%s: stream ended without [DONE]", url)
	}
	return ttfb, whole, resp.Header.Get("Server-Timing"), nil
}

func measure(ctx context.Context, cfg config, stderr io.Writer) ([]caseResult, error) {
	var out []caseResult
	c := newClient(cfg.concurrency)
	for _, name := range cfg.cases {
		label := name
		if cfg.label != "" {
			label += " (" + cfg.label + ")"
		}
		if name == "throughput" {
			r, err := throughput(ctx, cfg, label, stderr)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
			continue
		}
		mk := caseBodies[name]
		n := len(cfg.targets)
		ttfb, whole := make([][]time.Duration, n), make([][]time.Duration, n)
		stages := map[string][]time.Duration{} // the frontend's Server-Timing
		var stageOrder []string
		for i := -cfg.warmup; i < cfg.requests; i++ {
			for k := range n {
				t := (k + i + cfg.warmup) % n // rotate who goes first
				d, e, st, err := stream(ctx, c, cfg.targets[t].url, body(cfg.model, cfg.maxTokens, mk(i+cfg.warmup, t)))
				if err != nil {
					return nil, fmt.Errorf("%s: %w", label, err)
				}
				if i >= 0 {
					ttfb[t], whole[t] = append(ttfb[t], d), append(whole[t], e)
					if t == 2 {
						stageOrder = addStages(stages, stageOrder, st)
					}
				}
			}
			if i >= 0 && (i+1)%100 == 0 {
				fmt.Fprintf(stderr, "proxybench: %s: %d/%d\n", label, i+1, cfg.requests)
			}
		}
		r := caseResult{Case: label, Requests: cfg.requests}
		if cfg.frontendPID != 0 {
			// The frontend's CPU over requests sent to it alone, with new
			// prompts of the case's shape.
			sy := cfg.targets[2].url
			cpu0 := procCPU(cfg.frontendPID)
			for i := range cfg.requests {
				if _, _, _, err := stream(ctx, c, sy, body(cfg.model, cfg.maxTokens, mk(cfg.warmup+cfg.requests+i, 2))); err != nil {
					return nil, fmt.Errorf("%s: %w", label, err)
				}
			}
			r.FrontendCPU = float64((procCPU(cfg.frontendPID) - cpu0).Microseconds()) / float64(cfg.requests)
		}
		r.DirectP50 = us(pct(ttfb[0], 0.5))
		nd, sd := diffs(ttfb[1], ttfb[0]), diffs(ttfb[2], ttfb[0])
		r.NginxAdds, r.SYAdds = us(pct(nd, 0.5)), us(pct(sd, 0.5))
		r.NginxAddsP90, r.SYAddsP90 = us(pct(nd, 0.9)), us(pct(sd, 0.9))
		for _, name := range stageOrder {
			r.Stages = append(r.Stages, stageP50{Name: name, P50: us(pct(stages[name], 0.5))})
		}
		r.NginxAddsWhole, r.SYAddsWhole = us(pct(diffs(whole[1], whole[0]), 0.5)), us(pct(diffs(whole[2], whole[0]), 0.5))
		if r.NginxAdds > 0 {
			r.Ratio = r.SYAdds / r.NginxAdds
		}
		if n > 3 {
			fd := diffs(ttfb[3], ttfb[0])
			r.FloorAdds, r.FloorAddsP90 = us(pct(fd, 0.5)), us(pct(fd, 0.9))
			if r.FloorAdds > 0 {
				r.FloorRatio = r.SYAdds / r.FloorAdds
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// throughput runs cfg.concurrency closed-loop short streams against each
// target for cfg.duration and counts completed requests.
func throughput(ctx context.Context, cfg config, label string, stderr io.Writer) (caseResult, error) {
	r := caseResult{Case: fmt.Sprintf("throughput, %d streams", cfg.concurrency)}
	if cfg.label != "" {
		r.Case += " (" + cfg.label + ")"
	}
	rps := make([]float64, len(cfg.targets))
	for t, tg := range cfg.targets {
		c := newClient(cfg.concurrency)
		ctx, cancel := context.WithTimeout(ctx, cfg.duration)
		var done atomic.Int64
		var firstErr error
		var once sync.Once
		var wg sync.WaitGroup
		start := time.Now()
		for g := range cfg.concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					b := body(cfg.model, cfg.maxTokens, caseBodies["short"](i*cfg.concurrency+g, t))
					if _, _, _, err := stream(ctx, c, tg.url, b); err != nil {
						if ctx.Err() == nil {
							once.Do(func() { firstErr = err })
						}
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		cancel()
		if firstErr != nil && !errors.Is(firstErr, context.DeadlineExceeded) {
			return r, fmt.Errorf("%s %s: %w", label, tg.name, firstErr)
		}
		rps[t] = float64(done.Load()) / time.Since(start).Seconds()
		fmt.Fprintf(stderr, "proxybench: %s %s: %.0f req/s\n", label, tg.name, rps[t])
	}
	r.DirectRPS, r.NginxRPS, r.SYRPS = rps[0], rps[1], rps[2]
	if r.NginxRPS > 0 {
		r.Ratio = r.SYRPS / r.NginxRPS
	}
	if len(rps) > 3 {
		r.FloorRPS = rps[3]
		if r.FloorRPS > 0 {
			r.FloorRatio = r.SYRPS / r.FloorRPS
		}
	}
	return r, nil
}

func diffs(a, base []time.Duration) []time.Duration {
	d := make([]time.Duration, len(a))
	for i := range a {
		d[i] = a[i] - base[i]
	}
	return d
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1)+0.5)]
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// procCPU is a process's CPU time: the sum of its threads' time on a CPU
// from /proc/PID/task/*/schedstat (nanoseconds), or, without schedstat,
// user+system time from /proc/PID/stat (10 ms ticks: too coarse for a
// hundred requests). Threads that exited are in neither sum: the Go runtime
// keeps its threads.
func procCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		ns, _ := strconv.ParseInt(f[0], 10, 64)
		sum += time.Duration(ns)
	}
	if sum > 0 {
		return sum
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may hold spaces; fields
	// after it are space-separated: utime and stime are the 14th and 15th
	// fields of the line, the 12th and 13th after the name.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz
}

func printTable(w io.Writer, res []caseResult) {
	floor := slices.ContainsFunc(res, func(r caseResult) bool { return r.FloorAdds > 0 || r.FloorRPS > 0 })
	if floor {
		fmt.Fprintln(w, "| case | direct TTFB p50 | nginx adds (p50 / p90) | Go floor adds (p50 / p90) | Switchyard adds (p50 / p90) | ratio to nginx | ratio to Go floor |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	} else {
		fmt.Fprintln(w, "| case | direct TTFB p50 | nginx adds (p50 / p90) | Switchyard adds (p50 / p90) | ratio |")
		fmt.Fprintln(w, "|---|---|---|---|---|")
	}
	for _, r := range res {
		if r.DirectRPS > 0 {
			continue
		}
		if floor {
			fmt.Fprintf(w, "| %s | %.0f µs | %.0f / %.0f µs | %.0f / %.0f µs | %.0f / %.0f µs | **%.2f×** | %.2f× |\n",
				r.Case, r.DirectP50, r.NginxAdds, r.NginxAddsP90, r.FloorAdds, r.FloorAddsP90, r.SYAdds, r.SYAddsP90, r.Ratio, r.FloorRatio)
			continue
		}
		fmt.Fprintf(w, "| %s | %.0f µs | %.0f / %.0f µs | %.0f / %.0f µs | **%.2f×** |\n",
			r.Case, r.DirectP50, r.NginxAdds, r.NginxAddsP90, r.SYAdds, r.SYAddsP90, r.Ratio)
	}
	for _, r := range res {
		if r.DirectRPS == 0 {
			continue
		}
		if floor {
			fmt.Fprintf(w, "\n| %s | direct | nginx | Go floor | Switchyard | Switchyard / nginx | Switchyard / Go floor |\n|---|---|---|---|---|---|---|\n", r.Case)
			fmt.Fprintf(w, "| req/s | %.0f | %.0f | %.0f | %.0f | **%.2f×** | %.2f× |\n", r.DirectRPS, r.NginxRPS, r.FloorRPS, r.SYRPS, r.Ratio, r.FloorRatio)
			continue
		}
		fmt.Fprintf(w, "\n| %s | direct | nginx | Switchyard | Switchyard / nginx |\n|---|---|---|---|---|\n", r.Case)
		fmt.Fprintf(w, "| req/s | %.0f | %.0f | %.0f | **%.2f×** |\n", r.DirectRPS, r.NginxRPS, r.SYRPS, r.Ratio)
	}
	fmt.Fprintln(w)
	for _, r := range res {
		if r.DirectRPS == 0 {
			fmt.Fprintf(w, "to the end of the stream, p50: nginx adds %.0f µs, Switchyard %.0f µs (%s)\n", r.NginxAddsWhole, r.SYAddsWhole, r.Case)
		}
	}
	for _, r := range res {
		if len(r.Stages) > 0 {
			fmt.Fprintf(w, "frontend stages p50 (its Server-Timing header, %s):", r.Case)
			for _, st := range r.Stages {
				fmt.Fprintf(w, " %s %.0f µs", st.Name, st.P50)
			}
			fmt.Fprintln(w)
		}
	}
	for _, r := range res {
		if r.FrontendCPU > 0 {
			fmt.Fprintf(w, "\nfrontend CPU: %.0f µs per request, requests to it alone (%s)\n", r.FrontendCPU, r.Case)
		}
	}
}
