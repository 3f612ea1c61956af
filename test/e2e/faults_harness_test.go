//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

// natsServer is an external nats-server process (Debian's package), so the
// tests can kill and restart the bus the way an operator's would go down.
type natsServer struct {
	t    testing.TB
	port int
	dir  string
	conf string // extra nats-server configuration (authorization), if any
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  bytes.Buffer
}

// startNATS runs nats-server with JetStream on a free loopback port. It
// fails the test when nats-server is missing: .ci/run installs it.
func startNATS(t testing.TB) *natsServer { return startNATSConf(t, "") }

// startNATSConf is startNATS with extra configuration, e.g. the
// authorization block `switchyard nats-config` prints.
func startNATSConf(t testing.TB, conf string) *natsServer {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		t.Fatal("nats-server not found in PATH: these tests need a real external NATS server " +
			"(Debian: apt-get install nats-server; .ci/run installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &natsServer{t: t, port: ln.Addr().(*net.TCPAddr).Port, dir: t.TempDir(), conf: conf}
	ln.Close()
	n.start()
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			n.mu.Lock()
			t.Logf("nats-server output:\n%s", n.out.String())
			n.mu.Unlock()
		}
	})
	return n
}

func (n *natsServer) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

func (n *natsServer) Write(b []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.out.Write(b)
}

// start runs the server on its port and waits until it accepts clients.
func (n *natsServer) start() {
	n.t.Helper()
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", n.dir}
	if n.conf != "" {
		f := filepath.Join(n.dir, "nats.conf")
		cfg := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n%s", n.port, n.dir, n.conf)
		if err := os.WriteFile(f, []byte(cfg), 0o600); err != nil {
			n.t.Fatal(err)
		}
		args = []string{"-c", f}
	}
	cmd := exec.Command("nats-server", args...)
	cmd.Stdout, cmd.Stderr = n, n
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("start nats-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	eventually(n.t, 15*time.Second, "nats-server accepts clients", func() bool {
		select {
		case <-done:
			n.t.Fatalf("nats-server exited at start:\n%s", n.out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(n.port), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		n.mu.Lock()
		defer n.mu.Unlock()
		return strings.Contains(n.out.String()[max(0, n.out.Len()-4096):], "Server is ready")
	})
}

// kill ends the server at once (SIGKILL), as a crash or a host loss would.
func (n *natsServer) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// cluster is a frontend and workers as separate processes on an external
// NATS server.
type cluster struct {
	url     string // frontend
	workers map[string]*proc
	wurls   map[string]string
}

// startCluster starts a frontend and n workers (w1..wn) on nats.
// frontendArgs and workerArgs are added to their command lines.
func startCluster(t testing.TB, natsURL string, n int, frontendArgs, workerArgs []string) *cluster {
	t.Helper()
	c := &cluster{workers: map[string]*proc{}, wurls: map[string]string{}}
	// The fault tests' nats-server admits anyone: say so (see
	// TestUnauthenticatedBusRefused).
	_, m := start(t, readyURL, append([]string{"frontend", "--http-addr", "127.0.0.1:0", "--nats", natsURL, "--nats-insecure"}, frontendArgs...)...)
	c.url = m[1]
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("w%d", i)
		p, m := start(t, readyURL, append([]string{"worker", "--nats", natsURL, "--nats-insecure", "--id", id, "--http-addr", "127.0.0.1:0"}, workerArgs...)...)
		c.workers[id], c.wurls[id] = p, m[1]
	}
	c.waitHealthy(t, n, 30*time.Second)
	return c
}

// health is the part of /health the fault tests read.
type health struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Cause   string `json:"bus_cause"`
	Bus     string `json:"bus"`
	Workers []struct {
		ID       string `json:"id"`
		InFlight int    `json:"inflight"`
		Events   struct {
			State string `json:"state"`
		} `json:"events"`
	} `json:"workers"`
}

func (c *cluster) health(t testing.TB) health {
	t.Helper()
	var h health
	resp, err := http.Get(c.url + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	return h
}

// healthy: the bus is up and n workers are routable with healthy events.
func (h health) healthy(n int) bool {
	if h.Bus != "up" || len(h.Workers) != n {
		return false
	}
	for _, w := range h.Workers {
		if w.Events.State != "healthy" {
			return false
		}
	}
	return true
}

func (c *cluster) waitHealthy(t testing.TB, n int, within time.Duration) {
	t.Helper()
	eventually(t, within, fmt.Sprintf("%d workers routable with healthy KV events", n), func() bool { return c.health(t).healthy(n) })
}

// result is one client request's outcome.
type result struct {
	status  int
	worker  string
	source  string // x-switchyard-overlap-source
	err     error
	elapsed time.Duration
	at      time.Time
}

// chat sends one non-streaming chat request with its own client.
func chat(ctx context.Context, url, prompt string, maxTokens int) result {
	body, _ := json.Marshal(map[string]any{
		"model": "qwen3-0.6b", "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	start := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	r := result{at: start}
	if err != nil {
		r.err, r.elapsed = err, time.Since(start)
		return r
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.status, r.elapsed = resp.StatusCode, time.Since(start)
	r.worker, r.source = resp.Header.Get("x-switchyard-worker"), resp.Header.Get("x-switchyard-overlap-source")
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	r.err = err
	return r
}

// loadGen sends requests from conc clients, one after another each, until
// stop is closed or max requests were sent; it returns every result.
type loadGen struct {
	mu      sync.Mutex
	results []result
	wg      sync.WaitGroup
	stop    chan struct{}
}

func startLoad(url string, conc, max, maxTokens int) *loadGen {
	g := &loadGen{stop: make(chan struct{})}
	var sent sync.Mutex
	n := 0
	for c := 0; c < conc; c++ {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-g.stop:
					return
				default:
				}
				sent.Lock()
				if n >= max {
					sent.Unlock()
					return
				}
				n++
				sent.Unlock()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				// Prompts repeat per client so KV routing has prefixes to find.
				r := chat(ctx, url, fmt.Sprintf("client %d asks about item %d of the fault drill. %s", c, i%4, strings.Repeat("context ", 40)), maxTokens)
				cancel()
				g.mu.Lock()
				g.results = append(g.results, r)
				g.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return g
}

func (g *loadGen) finish() []result {
	close(g.stop)
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.results
}
