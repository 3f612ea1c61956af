//go:build e2e

// Package e2e drives the real switchyard binary as separate processes and
// talks to it with the official openai npm client. Run with `make e2e`, which
// builds the binary, installs the client and sets SWITCHYARD_BIN.
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
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one running switchyard process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	mu   sync.Mutex
	out  bytes.Buffer // stdout and stderr, for failure reports
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("SWITCHYARD_BIN")
	if bin == "" {
		t.Fatal("SWITCHYARD_BIN is not set: run the end-to-end tests with `make e2e`")
	}
	return bin
}

// start runs `switchyard args...` and waits until a line of its output
// matches ready, returning the first submatch. The process is killed at
// cleanup, and its output is printed if the test failed.
func start(t testing.TB, ready *regexp.Regexp, args ...string) (*proc, []string) {
	t.Helper()
	p := &proc{cmd: exec.Command(binary(t), args...), done: make(chan struct{})}
	pr, pw := io.Pipe()
	p.cmd.Stdout = pw
	p.cmd.Stderr = pw
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", args, err)
	}
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p, line)
			if !sent {
				if m := ready.FindStringSubmatch(line); m != nil {
					found <- m
					sent = true
				}
			}
		}
	}()
	exited := make(chan error, 1)
	go func() {
		err := p.cmd.Wait()
		pw.Close()
		close(p.done)
		exited <- err
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("output of switchyard %s:\n%s", strings.Join(args, " "), p.output())
		}
	})
	select {
	case m := <-found:
		return p, m
	case err := <-exited:
		t.Fatalf("switchyard %s exited before ready: %v\n%s", strings.Join(args, " "), err, p.output())
	case <-time.After(90 * time.Second):
		t.Fatalf("switchyard %s not ready after 90 s\n%s", strings.Join(args, " "), p.output())
	}
	return nil, nil
}

// stop sends SIGINT and waits; SIGKILL if it does not exit in time.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// kill ends the process at once, as a crash would.
func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

var readyURL = regexp.MustCompile(`ready: (http://[0-9.:]+)`)

// up starts `switchyard up` on a free port and returns the frontend URL.
func up(t testing.TB, args ...string) string {
	t.Helper()
	_, m := start(t, readyURL, append([]string{"up", "--http-addr", "127.0.0.1:0"}, args...)...)
	return m[1]
}

// node runs the openai-client scenario and decodes its JSON output into v.
func node(t testing.TB, scenario, url string, opts map[string]any, v any) {
	t.Helper()
	o, _ := json.Marshal(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("client", "client.mjs"), scenario, url, string(o))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client %s: %v\nstderr:\n%s", scenario, err, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("node client %s: bad JSON: %v\n%s", scenario, err, out)
	}
}

// getJSON fetches url and decodes the body; it returns the status code.
func getJSON(t testing.TB, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: decode: %v", url, err)
		}
	}
	return resp.StatusCode
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
