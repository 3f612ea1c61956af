//go:build e2e

package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// browser is a headless Chromium driven over the DevTools protocol.
type browser struct {
	t    *testing.T
	ws   *websocket.Conn
	mu   sync.Mutex
	next int
}

// chromium returns the path of Debian's chromium; the test fails (never
// skips) without it: .ci/run installs it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("SWITCHYARD_CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: the dashboard test needs headless Chromium (Debian: apt-get install chromium; .ci/run installs it), or set SWITCHYARD_CHROMIUM")
	return ""
}

// startBrowser runs headless Chromium with a fresh profile and attaches to
// its first page.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(chromium(t), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+dir,
		"--remote-debugging-port=0", "--remote-allow-origins=*", "--window-size=1400,1000", "about:blank")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// Chromium writes the port it chose to DevToolsActivePort.
	var port string
	eventually(t, 30*time.Second, "chromium writes DevToolsActivePort", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "DevToolsActivePort"))
		if err != nil {
			return false
		}
		port = strings.SplitN(string(b), "\n", 2)[0]
		return port != ""
	})
	var targets []struct {
		Type string `json:"type"`
		WS   string `json:"webSocketDebuggerUrl"`
	}
	eventually(t, 10*time.Second, "chromium lists its page", func() bool {
		getJSON(t, "http://127.0.0.1:"+port+"/json/list", &targets)
		for _, tg := range targets {
			if tg.Type == "page" {
				return true
			}
		}
		return false
	})
	var wsURL string
	for _, tg := range targets {
		if tg.Type == "page" {
			wsURL = tg.WS
			break
		}
	}
	ws, err := websocket.Dial(wsURL, "", "http://127.0.0.1/")
	if err != nil {
		t.Fatalf("DevTools websocket %s: %v\n%s", wsURL, err, out.String())
	}
	ws.MaxPayloadBytes = 64 << 20 // screenshots
	t.Cleanup(func() { ws.Close() })
	return &browser{t: t, ws: ws}
}

// call sends one DevTools command and returns its result, skipping the
// events that arrive meanwhile.
func (b *browser) call(method string, params any, result any) {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	id := b.next
	if err := websocket.JSON.Send(b.ws, map[string]any{"id": id, "method": method, "params": params}); err != nil {
		b.t.Fatalf("devtools %s: %v", method, err)
	}
	_ = b.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := websocket.JSON.Receive(b.ws, &msg); err != nil {
			b.t.Fatalf("devtools %s: %v", method, err)
		}
		if msg.ID != id {
			continue
		}
		if msg.Error != nil {
			b.t.Fatalf("devtools %s: %s", method, msg.Error.Message)
		}
		if result != nil {
			if err := json.Unmarshal(msg.Result, result); err != nil {
				b.t.Fatalf("devtools %s: %v", method, err)
			}
		}
		return
	}
}

// eval evaluates a JavaScript expression in the page and returns its value
// as JSON.
func (b *browser) eval(expr string) json.RawMessage {
	b.t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	b.call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r)
	if r.Exception != nil {
		b.t.Fatalf("evaluate %q: %s", expr, r.Exception.Text)
	}
	return r.Result.Value
}

func (b *browser) evalString(expr string) string {
	var s string
	_ = json.Unmarshal(b.eval(expr), &s)
	return s
}

func (b *browser) evalInt(expr string) int {
	n, _ := strconv.Atoi(b.evalString("String(" + expr + ")"))
	return n
}

// TestDashboard loads GET /ui of `switchyard up` in headless Chromium and
// checks that it shows the workers, that a worker whose KV events are off
// shows as disabled within 3 s of joining (with the degraded state in the
// banner), and that requests show up in the charts. It saves a screenshot
// to $SWITCHYARD_UI_SCREENSHOT (the README's docs/ui.png) when set.
func TestDashboard(t *testing.T) {
	login := newNATSLogin(t)
	p, m := start(t, readyURL, "up", "--http-addr", "127.0.0.1:0", "--workers", "2", "--prefill-workers", "1", "--speedup", "20",
		"--nats-addr", "127.0.0.1:0", "--nats-secret-file", login.secretFile, "--worker-key", "ui-test-worker-key")
	url := m[1]
	var natsURL string
	eventually(t, 10*time.Second, "up prints its NATS URL", func() bool {
		if mm := regexp.MustCompile(`NATS (nats://[0-9.:]+)`).FindStringSubmatch(p.output()); mm != nil {
			natsURL = mm[1]
		}
		return natsURL != ""
	})

	b := startBrowser(t)
	b.call("Page.enable", nil, nil)
	b.call("Page.navigate", map[string]any{"url": url + "/ui"}, nil)
	eventually(t, 15*time.Second, "the dashboard lists the three workers", func() bool {
		return b.evalInt(`document.querySelectorAll("[data-worker]").length`) == 3
	})
	if st := b.evalString(`document.body.dataset.status`); st != "ok" {
		t.Errorf("page status = %q with every worker healthy, want ok", st)
	}

	// A worker with KV events off joins: the page must say so within 3 s.
	start(t, readyURL, append([]string{"worker", "--nats", natsURL, "--id", "w-off", "--http-addr", "127.0.0.1:0",
		"--kv-events=false", "--speedup", "20", "--worker-key", "ui-test-worker-key"}, login.workerArgs(t, "w-off")...)...)
	joined := time.Now()
	eventually(t, 10*time.Second, "w-off is in the registry", func() bool {
		var h struct {
			Workers []struct{ ID string } `json:"workers"`
		}
		getJSON(t, url+"/health", &h)
		for _, w := range h.Workers {
			if w.ID == "w-off" {
				return true
			}
		}
		return false
	})
	eventually(t, 3*time.Second, "the page shows w-off's KV events as disabled", func() bool {
		return b.evalString(`(document.querySelector('[data-worker="w-off"]') || {dataset: {}}).dataset.state || ""`) == "disabled"
	})
	t.Logf("w-off shown as disabled %v after its registration", time.Since(joined).Round(10*time.Millisecond))
	if st := b.evalString(`document.body.dataset.status`); st != "degraded" {
		t.Errorf("page status = %q with a worker's events off, want degraded", st)
	}
	if banner := b.evalString(`document.getElementById("banner").textContent`); !strings.Contains(banner, "w-off events disabled") {
		t.Errorf("banner %q does not name w-off's disabled events", banner)
	}

	// Requests show up in the charts: the request and TTFT charts count
	// them, the hit-ratio chart gets a point.
	before := b.evalInt(`document.getElementById("chart-req").dataset.samples`)
	const n = 12
	prompt := strings.Repeat("the switchyard sorts the trains onto their tracks ", 40)
	for i := 0; i < n; i++ {
		body := fmt.Sprintf(`{"model":"qwen3-0.6b","prompt":%q,"max_tokens":12,"stream":true,"stream_options":{"include_usage":true}}`, prompt+strconv.Itoa(i%3))
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = new(bytes.Buffer).ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("completion %d: HTTP %d", i, resp.StatusCode)
		}
	}
	eventually(t, 5*time.Second, "the charts count the requests", func() bool {
		return b.evalInt(`document.getElementById("chart-req").dataset.samples`)-before >= n &&
			b.evalInt(`document.getElementById("chart-ttft").dataset.samples`) >= n &&
			b.evalInt(`document.getElementById("chart-hit").dataset.samples`) >= 1 &&
			b.evalInt(`document.querySelectorAll("#chart-ttft circle").length`) >= 1
	})
	// A healthy worker's events line says what its stream is doing now, not
	// the resync it started with.
	if txt := b.evalString(`Array.from(document.querySelectorAll('tr[data-state="healthy"] td.events .cause')).map(e => e.textContent).join("|")`); txt == "" ||
		!regexp.MustCompile(`^(seq \d+ · \d+ batches · \d+ blocks\|?)+$`).MatchString(txt) {
		t.Errorf("healthy workers' events lines %q, want seq, batches and blocks", txt)
	}
	// Axis ticks are evenly spaced at 1, 2 or 5 × 10^k.
	for _, id := range []string{"chart-req", "chart-ttft", "chart-hit"} {
		labels := b.evalString(`Array.from(document.querySelectorAll("#` + id + ` text.tick")).map(t => t.textContent).join("|")`)
		if err := evenTicks(strings.Split(labels, "|")); err != nil {
			t.Errorf("%s ticks %q: %v", id, labels, err)
		}
	}
	// The TTFT headline stays on one line in the narrowest four-card layout
	// (the cards stack below 1100 px) and wider: wrapped, it pushed the
	// card's contents down. At 1101 px it must hold a worst case too.
	oneLine := `(e => e.offsetHeight <= 1.5 * parseFloat(getComputedStyle(e).lineHeight) && e.scrollWidth <= e.clientWidth)(document.getElementById("ttft-now"))`
	for _, w := range []int{1400, 1280, 1101} {
		b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": w, "height": 1000, "deviceScaleFactor": 1, "mobile": false}, nil)
		eventually(t, 5*time.Second, fmt.Sprintf("the TTFT headline fits one line at %d px", w), func() bool {
			return strings.Contains(b.evalString(`document.getElementById("ttft-now").textContent`), "ms") && b.evalString("String("+oneLine+")") == "true"
		})
	}
	if got := b.evalString(`String((e => { fitLine(e, "12345 / 23456 / 34567 ms"); return ` + oneLine + `; })(document.getElementById("ttft-now")))`); got != "true" {
		t.Errorf("a five-digit TTFT headline does not fit one line at 1101 px: %s (%s)", got,
			b.evalString(`(e => e.offsetHeight + "px high, " + e.scrollWidth + "/" + e.clientWidth + "px wide")(document.getElementById("ttft-now"))`))
	}
	b.call("Emulation.clearDeviceMetricsOverride", map[string]any{}, nil)
	// Every worker's row has its index agreement cell: "–" until a response
	// on it is judged, then the agreeing share of its window.
	if cells := b.evalString(`Array.from(document.querySelectorAll("#workers td.agreement")).map(td => td.textContent).join("|")`); strings.Count(cells, "|") != 3 ||
		!regexp.MustCompile(`^((–|\d+% of \d+ \(blind \d+, stale \d+\))\|?)+$`).MatchString(cells) {
		t.Errorf("index agreement cells %q, want one per worker", cells)
	}
	// Every API is counted, by name.
	for path, body := range map[string]string{
		"/v1/messages":  `{"model":"qwen3-0.6b","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`,
		"/v1/responses": `{"model":"qwen3-0.6b","max_output_tokens":4,"input":"hi"}`,
	} {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = new(bytes.Buffer).ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: HTTP %d", path, resp.StatusCode)
		}
	}
	eventually(t, 5*time.Second, "the request card names every endpoint", func() bool {
		got := b.evalString(`document.getElementById("req-total").textContent`)
		return strings.Contains(got, fmt.Sprintf("%d completions", n)) && strings.Contains(got, "1 messages") && strings.Contains(got, "1 responses")
	})
	// The admission card counts the requests admitted at once and lists
	// each priority's queue.
	eventually(t, 5*time.Second, "the admission card counts admissions", func() bool {
		return strings.Contains(b.evalString(`document.getElementById("adm-outcomes").textContent`), "admitted ") &&
			b.evalInt(`document.querySelectorAll("#admission [data-priority]").length`) == 3
	})

	// The page loads nothing from elsewhere: every resource is this origin.
	if n := b.evalInt(`performance.getEntriesByType("resource").filter(e => !e.name.startsWith(location.origin)).length`); n != 0 {
		t.Errorf("the page loaded %d resources from other origins", n)
	}

	// Unauthenticated from another address is covered by the frontend's unit
	// test; here: the page is served with its CSP.
	resp, err := http.Get(url + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("CSP %q", csp)
	}

	if path := os.Getenv("SWITCHYARD_UI_SCREENSHOT"); path != "" {
		time.Sleep(2 * time.Second) // two more polls, so the charts have a few points
		b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 1400, "height": 1010, "deviceScaleFactor": 1, "mobile": false}, nil)
		var shot struct {
			Data string `json:"data"`
		}
		b.call("Page.captureScreenshot", map[string]any{"format": "png"}, &shot)
		png, err := base64.StdEncoding.DecodeString(shot.Data)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
}

// evenTicks checks axis labels: at least two, starting at 0, each one step
// above the last, the step 1, 2 or 5 times a power of ten.
func evenTicks(labels []string) error {
	if len(labels) < 2 {
		return fmt.Errorf("%d ticks, want at least 2", len(labels))
	}
	var vs []float64
	for _, l := range labels {
		v, err := strconv.ParseFloat(strings.TrimSuffix(l, "%"), 64)
		if err != nil {
			return fmt.Errorf("tick %q is not a number", l)
		}
		vs = append(vs, v)
	}
	step := vs[1] - vs[0]
	if vs[0] != 0 || !(step > 0) {
		return fmt.Errorf("ticks start at %v with step %v, want 0 and a positive step", vs[0], step)
	}
	for i := 2; i < len(vs); i++ {
		if d := vs[i] - vs[i-1]; math.Abs(d-step) > 1e-9*math.Max(1, step) {
			return fmt.Errorf("uneven step %v after %v", d, step)
		}
	}
	p := math.Pow(10, math.Floor(math.Log10(step)+1e-9))
	if f := step / p; math.Abs(f-1) > 1e-6 && math.Abs(f-2) > 1e-6 && math.Abs(f-5) > 1e-6 {
		return fmt.Errorf("step %v is not 1, 2 or 5 × 10^k", step)
	}
	return nil
}
