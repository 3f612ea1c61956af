//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestUpStopsCleanlyOnInterrupt: Ctrl-C (SIGINT) stops `up` with exit code
// 0, and its port stops answering.
func TestUpStopsCleanlyOnInterrupt(t *testing.T) {
	p, m := start(t, regexp.MustCompile(`ready: (http://[0-9.:]+)`), "up", "--http-addr", "127.0.0.1:0")
	url := m[1]
	if code := getJSON(t, url+"/health", nil); code != http.StatusOK {
		t.Fatalf("/health = %d before the interrupt", code)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("up did not exit within 20 s of SIGINT")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("up exited %d after SIGINT, want 0\n%s", code, p.output())
	}
	if _, err := http.Get(url + "/health"); err == nil {
		t.Errorf("frontend still answers after up exited")
	}
	// A normal start and shutdown are not news: no WARN or ERROR line, in
	// particular not "worker left the registry" for the workers up itself
	// stops, nor a new worker's first KV snapshot.
	for _, line := range strings.Split(p.output(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("a normal run logged %q", line)
		}
	}
}

// TestFrontendQuietsRuntimeMonitor: the frontend re-executes itself once
// at start with the GODEBUG setting that keeps the Go runtime's monitor
// from polling through every request (internal/sysmon), and the process
// the test started is the one that serves.
func TestFrontendQuietsRuntimeMonitor(t *testing.T) {
	p, m := start(t, readyURL, "frontend", "--http-addr", "127.0.0.1:0", "--nats-addr", "127.0.0.1:0", "--nats-auth=false")
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var godebug []string
	for _, kv := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(kv, "GODEBUG=") {
			godebug = append(godebug, kv)
		}
	}
	if len(godebug) != 1 || !strings.Contains(godebug[0], "schedtrace=2147483647") {
		t.Fatalf("the frontend's environment has %q; want one GODEBUG with schedtrace=2147483647", godebug)
	}
	resp, err := http.Get(m[1] + "/health")
	if err != nil {
		t.Fatalf("the re-executed frontend does not serve: %v", err)
	}
	resp.Body.Close()
}
