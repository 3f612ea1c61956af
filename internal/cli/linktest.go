package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

func init() {
	register(command{name: "linktest", summary: "measure KV-transfer throughput between prefill and decode workers", run: runLinktest})
}

// maxProbeBytes is the frontend's limit on one probe (POST /admin/links/probe).
const maxProbeBytes = 1 << 30

type linktestCmd struct {
	url      string
	adminKey string
	from, to string
	bytes    int64
	json     string // --json FILE; "-": stdout
	timeout  time.Duration
}

// linkResult is one measured pair: the frontend's probe answer.
type linkResult struct {
	From        string  `json:"from"`
	To          string  `json:"to"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	RTTMillis   float64 `json:"rtt_ms"`
	Emulated    string  `json:"emulated,omitempty"`
	Error       string  `json:"error,omitempty"`
}

const linktestAbout = `Measures KV-transfer throughput between prefill and decode workers: the frontend has each
prefill worker send --bytes to each decode worker over the KV-transfer link (POST
/admin/links/probe), and prints MB/s, Gbit/s and round-trip time per pair. Exit 1 when a
probe fails.

  switchyard linktest --url http://127.0.0.1:8000 --bytes 256MiB`

func parseLinktest(args []string, env Env) (linktestCmd, int) {
	var c linktestCmd
	fs := newFlagSet("linktest", linktestAbout)
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8000", "frontend base URL (a client's .../v1 is accepted)")
	fs.StringVar(&c.adminKey, "admin-key", "", "bearer token for /admin/* (default: $"+envAdminKey+"; empty: loopback-only admin)")
	fs.StringVar(&c.from, "from", "", "prefill worker id (empty: every prefill worker listed by GET /admin/links)")
	fs.StringVar(&c.to, "to", "", "decode worker id (empty: every decode worker listed by GET /admin/links)")
	size := fs.String("bytes", "256MiB", "bytes to transfer per pair, e.g. 64MB, 256MiB, 1GiB (at most 1GiB)")
	fs.StringVar(&c.json, "json", "", "write the results as JSON to `FILE`; - prints them on stdout instead of the table")
	fs.DurationVar(&c.timeout, "timeout", 0, "per-probe timeout (0: bytes / 10 MB/s + 30 s)")
	if code := parseFlags(fs, args, env); code >= 0 {
		return c, code
	}
	bad := func(format string, a ...any) (linktestCmd, int) {
		fmt.Fprintf(env.Stderr, "switchyard linktest: "+format+"\n", a...)
		return c, ExitUsage
	}
	n, err := parseSize(*size)
	if err != nil {
		return bad("--bytes %q: %v (examples: 64MB, 256MiB, 1GiB)", *size, err)
	}
	if n <= 0 || n > maxProbeBytes {
		return bad("--bytes %q: want more than 0 and at most 1GiB", *size)
	}
	c.bytes = n
	if err := checkOutput("--json", c.json); err != nil {
		return bad("%v", err)
	}
	c.url = frontendURL(c.url)
	keysFromEnv(nil, &c.adminKey, os.Getenv)
	u, err := url.Parse(c.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("--url %q: want http://host:port", c.url)
	}
	c.url = strings.TrimRight(c.url, "/")
	if c.timeout < 0 {
		return bad("--timeout %v: want >= 0", c.timeout)
	}
	if c.timeout == 0 {
		// The frontend documents a probe as taking up to bytes / 10 MB/s + 10 s.
		c.timeout = time.Duration(float64(c.bytes)/10e6*float64(time.Second)) + 30*time.Second
	}
	return c, -1
}

// parseSize parses a byte count with an optional unit: B, kB/KB, MB, GB
// (powers of 1000) or KiB, MiB, GiB (powers of 1024). Units are
// case-insensitive except that "b" alone means bytes.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = strings.TrimSpace(s[:i]), strings.TrimSpace(s[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("%q is not a number", num)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
	}[strings.ToLower(unit)]
	if mult == 0 {
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	b := v * mult
	if b > math.MaxInt64/2 || b != math.Trunc(b) {
		return 0, fmt.Errorf("%v bytes is not a whole, representable count", b)
	}
	return int64(b), nil
}

// linkClient talks to the frontend's admin endpoints.
type linkClient struct {
	base, key string
	hc        *http.Client
}

func (c *linkClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("linktest: encode %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("linktest: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("linktest: %s %s: %w (is the frontend running at --url %s?)", method, path, err, c.base)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("linktest: %s %s: read body: %w", method, path, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("linktest: %s %s: HTTP %d: pass the frontend's admin key with --admin-key (or set $SWITCHYARD_ADMIN_KEY)", method, path, resp.StatusCode)
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("linktest: %s %s: HTTP %d: %s", method, path, resp.StatusCode, errorMessage(b))
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("linktest: %s %s: decode: %w", method, path, err)
	}
	return nil
}

// errorMessage extracts an OpenAI-shaped error's message, else the body.
func errorMessage(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return strings.TrimSpace(string(b))
}

// pairs lists the (prefill, decode) pairs to test: the one named, or every
// pair GET /admin/links lists that matches --from and --to when given.
func (c *linkClient) pairs(ctx context.Context, from, to string) ([][2]string, error) {
	if from != "" && to != "" {
		return [][2]string{{from, to}}, nil
	}
	var links struct {
		Links []struct {
			From string `json:"from"`
			To   string `json:"to"`
		} `json:"links"`
	}
	if err := c.do(ctx, http.MethodGet, "/admin/links", nil, &links); err != nil {
		return nil, err
	}
	var out [][2]string
	for _, l := range links.Links {
		if (from == "" || l.From == from) && (to == "" || l.To == to) {
			out = append(out, [2]string{l.From, l.To})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("linktest: GET /admin/links lists no prefill → decode pair matching --from %q --to %q (does the deployment have prefill and decode workers?)", from, to)
	}
	return out, nil
}

func runLinktest(ctx context.Context, args []string, env Env) int {
	c, code := parseLinktest(args, env)
	if code >= 0 {
		return code
	}
	lc := &linkClient{base: c.url, key: c.adminKey, hc: &http.Client{}}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	pairs, err := lc.pairs(lctx, c.from, c.to)
	cancel()
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard linktest: %v\n", err)
		return ExitFail
	}
	var results []linkResult
	failed := 0
	for _, p := range pairs {
		fmt.Fprintf(env.Stderr, "linktest: %s → %s: transferring %s...\n", p[0], p[1], humanBytes(c.bytes))
		pctx, cancel := context.WithTimeout(ctx, c.timeout)
		r := linkResult{From: p[0], To: p[1], Bytes: c.bytes}
		err := lc.do(pctx, http.MethodPost, "/admin/links/probe",
			map[string]any{"from": p[0], "to": p[1], "bytes": c.bytes}, &r)
		cancel()
		if err == nil && !(r.BytesPerSec > 0) {
			err = fmt.Errorf("linktest: probe %s → %s answered a throughput of %v", p[0], p[1], r.BytesPerSec)
		}
		if err != nil {
			r.Error = err.Error()
			failed++
		}
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	if c.json != stdoutPath {
		writeLinkTable(env.Stdout, results)
	}
	if c.json != "" {
		err := writeOutput(c.json, env.Stdout, func(path string) error {
			b, err := json.MarshalIndent(map[string]any{"url": c.url, "results": results}, "", "  ")
			if err != nil {
				return err
			}
			return os.WriteFile(path, append(b, '\n'), 0o644)
		})
		if err != nil {
			fmt.Fprintf(env.Stderr, "switchyard linktest: --json: %v\n", err)
			return ExitFail
		}
		wrote(env.Stderr, "linktest", c.json)
	}
	if failed > 0 || ctx.Err() != nil {
		fmt.Fprintf(env.Stderr, "switchyard linktest: %d of %d probes failed\n", failed+len(pairs)-len(results), len(pairs))
		return ExitFail
	}
	return ExitOK
}

func writeLinkTable(w io.Writer, rs []linkResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "from\tto\tbytes\tseconds\tMB/s\tGbit/s\tRTT ms\tlink")
	for _, r := range rs {
		link := "measured (real)"
		if r.Emulated != "" {
			link = r.Emulated
		}
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\tFAILED: %s\n", r.From, r.To, humanBytes(r.Bytes), r.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%.1f\t%.3f\t%.3f\t%s\n", r.From, r.To, humanBytes(r.Bytes), r.Seconds,
			r.BytesPerSec/1e6, r.BytesPerSec*8/1e9, r.RTTMillis, link)
	}
	_ = tw.Flush()
}

// humanBytes prints n in the largest unit (binary first) that divides it,
// else in bytes.
func humanBytes(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"GB", 1e9}, {"MB", 1e6}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
