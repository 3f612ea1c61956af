//go:build e2e

package e2e

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// metric reads one sample of the frontend's /metrics; 0 when absent.
func metric(t testing.TB, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// TestWorkerFrozenAndKilled runs four workers under load, then freezes w2
// (SIGSTOP: its sockets still accept) and kills w3 at once. A frozen
// worker gets no new request 2 s after its first timeout and no request
// waits on it much past --header-timeout; the killed worker is ejected
// after its first refused connections instead of being tried until its
// registry entry expires.
func TestWorkerFrozenAndKilled(t *testing.T) {
	t.Parallel()
	const headerTimeout = 2 * time.Second
	ns := startNATS(t)
	c := startCluster(t, ns.URL(), 4, []string{"--header-timeout", headerTimeout.String(), "--router", "round-robin"}, []string{"--speedup", "20"})
	g := startLoad(c.url, 4, 100000, 8)
	eventually(t, 20*time.Second, "load running", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.results) >= 20 })
	frozen := c.workers["w2"]
	if err := syscall.Kill(frozen.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(frozen.cmd.Process.Pid, syscall.SIGCONT)
	faultAt := time.Now()
	c.workers["w3"].kill()
	time.Sleep(10 * time.Second) // the load runs through the faults and the registry expiry (6 s)
	all := g.finish()
	_ = syscall.Kill(frozen.cmd.Process.Pid, syscall.SIGCONT)

	var firstTimeout time.Time
	for _, r := range all {
		if r.status == http.StatusGatewayTimeout && (firstTimeout.IsZero() || r.at.Add(r.elapsed).Before(firstTimeout)) {
			firstTimeout = r.at.Add(r.elapsed)
		}
	}
	if firstTimeout.IsZero() {
		// The suspect check (1 s, then a 1 s health check) gave up on w2
		// as the 2 s header timeout would have, and every request it held
		// was retried: the freeze itself is then the first sign.
		firstTimeout = faultAt
	}
	late, failed, slowest := 0, 0, time.Duration(0)
	for _, r := range all {
		if r.err != nil {
			failed++
			if r.at.After(firstTimeout.Add(2 * time.Second)) {
				late++
				t.Errorf("request sent %v after the first timeout failed: %v", r.at.Sub(firstTimeout).Round(time.Millisecond), r.err)
			}
		}
		slowest = max(slowest, r.elapsed)
	}
	// The watchdog gives up at the header timeout; allow 2 s for a loaded
	// machine, far below the 10-minute request timeout that bounded it before.
	if slowest > headerTimeout+2*time.Second {
		t.Errorf("slowest request took %v, want at most about --header-timeout %v", slowest, headerTimeout)
	}
	connFails := metric(t, c.url, `switchyard_errors_total{kind="upstream_connect"}`)
	// Four clients can each hit the dead worker once before it is ejected
	// (two refusals eject it); every one of those was retried elsewhere.
	if connFails > 6 {
		t.Errorf("%v connection failures on the killed worker, want it ejected after the first few", connFails)
	}
	t.Logf("%d requests, %d failed (in flight on or sent to w2 before its first timeout %v after the fault), slowest %v, %v refused connections to w3",
		len(all), failed, firstTimeout.Sub(faultAt).Round(time.Millisecond), slowest.Round(time.Millisecond), connFails)
}

// metricSum adds every sample of /metrics whose line starts with prefix and
// contains each of the label pairs in labels.
func metricSum(t testing.TB, url, prefix string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sum := 0.0
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			f, _ := strconv.ParseFloat(line[i+1:], 64)
			sum += f
		}
	}
	return sum
}

// TestWorkerFrozenSuspected: with the default (60 s) header timeout, a
// frozen worker (SIGSTOP) is suspected from its silence within about 2 s
// (a request waits 1 s, then its /health fails to answer within 1 s): it
// gets no new request after that, and the requests it held are retried
// elsewhere, so none fails.
func TestWorkerFrozenSuspected(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	c := startCluster(t, ns.URL(), 3, []string{"--router", "round-robin"}, []string{"--speedup", "20"})
	g := startLoad(c.url, 4, 100000, 8)
	eventually(t, 20*time.Second, "load running", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.results) >= 20 })
	frozen := c.workers["w2"]
	if err := syscall.Kill(frozen.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(frozen.cmd.Process.Pid, syscall.SIGCONT)
	faultAt := time.Now()
	attempts := func() float64 {
		return metricSum(t, c.url, "switchyard_worker_requests_total{", `worker="w2"`)
	}
	// An attempt is counted when it ends; one started on w2 just before
	// the ejection (≈2 s) ends ≈2 s later. From 5 s on, nothing may start.
	time.Sleep(time.Until(faultAt.Add(5 * time.Second)))
	at5 := attempts()
	time.Sleep(time.Until(faultAt.Add(9 * time.Second)))
	at9 := attempts()
	all := g.finish()
	_ = syscall.Kill(frozen.cmd.Process.Pid, syscall.SIGCONT)

	failed, slowest := 0, time.Duration(0)
	for _, r := range all {
		if r.err != nil {
			if failed++; failed <= 5 {
				t.Logf("failed at %s: %v", r.at.Format("15:04:05.000"), r.err)
			}
		}
		slowest = max(slowest, r.elapsed)
	}
	t.Logf("%d requests, %d failed, slowest %v; attempts on frozen w2: %v by 5 s after the freeze, %v by 9 s",
		len(all), failed, slowest.Round(time.Millisecond), at5, at9)
	if failed > 0 {
		t.Errorf("%d of %d requests failed; want 0 (those held by the frozen worker retried elsewhere)", failed, len(all))
	}
	if at9 > at5 {
		t.Errorf("w2 got %v new requests between 5 s and 9 s after it froze; want none", at9-at5)
	}
	// Suspected after ≈2 s, then retried; 3 s of slack for a loaded box.
	if slowest > 5*time.Second {
		t.Errorf("slowest request took %v; want about 2 s plus a retry", slowest)
	}
}
