package frontend

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// frozenWorker is a worker whose process is stopped (SIGSTOP): the kernel
// still accepts its connections, but nothing ever answers.
func frozenWorker(t testing.TB, id string) Worker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return Worker{ID: id, Role: RoleAggregated, Model: testModel, URL: "http://" + ln.Addr().String(), MaxModelLen: 4096}
}

// TestFrozenWorkerEjected: after its first timeout a frozen worker gets no
// new request, for streaming and non-streaming requests alike, and no
// request waits on it much past the header timeout.
func TestFrozenWorkerEjected(t *testing.T) {
	const headerTimeout = 400 * time.Millisecond
	for _, stream := range []bool{true, false} {
		name := "non-streaming"
		body := `{"model":"qwen3-0.6b","prompt":"hello there"}`
		if stream {
			name, body = "streaming", streamBody
		}
		t.Run(name, func(t *testing.T) {
			frozen := frozenWorker(t, "w-frozen")
			b := newFakeWorker(t, "w-b")
			h := newHarness(t, Config{HeaderTimeout: headerTimeout, EjectProbeEvery: 50 * time.Millisecond}, Deps{},
				frozen, b.worker(RoleAggregated))
			h.router.prefer = []string{"w-frozen"} // the router keeps choosing it while it may
			start := time.Now()
			resp, got := h.do(t, "POST", "/v1/completions", body)
			el := time.Since(start)
			if resp.StatusCode != http.StatusGatewayTimeout {
				t.Fatalf("first request: status %d, want 504 from the frozen worker: %s", resp.StatusCode, got)
			}
			// The deadline is the header timeout; a second of slack for a
			// loaded machine, far below the 10-minute request timeout.
			if el > headerTimeout+time.Second {
				t.Errorf("first request took %v, want about the header timeout %v", el, headerTimeout)
			}
			for i := 0; i < 10; i++ {
				resp, got := h.do(t, "POST", "/v1/completions", body)
				if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-b" {
					t.Fatalf("request %d after the timeout: status %d worker %q: %s", i, resp.StatusCode, resp.Header.Get(HeaderWorker), got)
				}
			}
			if got := value(t, h.s.m.ejections); got != 1 {
				t.Errorf("ejections = %v, want 1", got)
			}
			if hl := h.s.Health(); !strings.Contains(hl.Reason, "w-frozen ejected") {
				t.Errorf("/health reason %q does not mention the ejection", hl.Reason)
			}
		})
	}
}

// TestEjectedWorkerProbedBackIn: a worker that refused connections is
// ejected after two attempts, and routed to again once it answers.
func TestEjectedWorkerProbedBackIn(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	wa := a.worker(RoleAggregated)
	// Reserve an address that refuses connections, then serve on it later.
	addr, listen := refusingAddr(t)
	wa.URL = "http://" + addr
	h := newHarness(t, Config{EjectProbeEvery: 50 * time.Millisecond}, Deps{}, wa, b.worker(RoleAggregated))
	h.router.prefer = []string{"w-a"}
	for i := 0; i < 2; i++ {
		resp, got := h.do(t, "POST", "/v1/completions", streamBody)
		if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-b" {
			t.Fatalf("request %d: status %d worker %q (want retried on w-b): %s", i, resp.StatusCode, resp.Header.Get(HeaderWorker), got)
		}
	}
	if !h.s.ejected("w-a") {
		t.Fatalf("w-a not ejected after two refused connections")
	}
	retries := value(t, h.s.m.retries)
	resp, _ := h.do(t, "POST", "/v1/completions", streamBody)
	if resp.Header.Get(HeaderWorker) != "w-b" || value(t, h.s.m.retries) != retries {
		t.Errorf("an ejected worker was tried again (worker %q, retries %v → %v)", resp.Header.Get(HeaderWorker), retries, value(t, h.s.m.retries))
	}
	// Bring w-a up on its address: the probe must put it back.
	ln := listen()
	srv := &http.Server{Handler: a.srv.Config.Handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	waitFor(t, "w-a probed back in", func() bool { return !h.s.ejected("w-a") })
	resp, got := h.do(t, "POST", "/v1/completions", streamBody)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-a" {
		t.Errorf("after the probe: status %d worker %q, want w-a: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), got)
	}
}

// TestCancelWorkerRetriesElsewhere: a worker that leaves the registry with
// a request waiting on it has that request cancelled and run elsewhere.
func TestCancelWorkerRetriesElsewhere(t *testing.T) {
	a, b := newFakeWorker(t, "w-a"), newFakeWorker(t, "w-b")
	h := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated), b.worker(RoleAggregated))
	a.setMode(modeHangHeaders)
	type res struct {
		status int
		worker string
	}
	done := make(chan res, 1)
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", h.srv.URL+"/v1/completions", strings.NewReader(streamBody))
		resp, err := h.srv.Client().Do(req)
		if err != nil {
			done <- res{}
			return
		}
		resp.Body.Close()
		done <- res{resp.StatusCode, resp.Header.Get(HeaderWorker)}
	}()
	waitFor(t, "request in flight on w-a", func() bool { return h.s.inflightCounter("w-a").Load() == 1 })
	if n := h.s.CancelWorker("w-a", "no registry refresh for 6s"); n != 1 {
		t.Errorf("CancelWorker cancelled %d requests, want 1", n)
	}
	select {
	case r := <-done:
		if r.status != 200 || r.worker != "w-b" {
			t.Errorf("request: status %d worker %q, want 200 from w-b", r.status, r.worker)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("request still hanging 10 s after its worker left")
	}
	if got := value(t, h.s.m.errors.WithLabelValues(errKindWorkerGone)); got != 1 {
		t.Errorf("errors{worker_gone} = %v, want 1", got)
	}
}

// refusingAddr reserves a loopback address on which connections are refused:
// a socket bound with SO_REUSEPORT but not listening holds the port, so no
// other test or process can take it. listen opens a second SO_REUSEPORT
// socket on it that accepts, then lets the reservation go. (Closing a probe
// listener and binding again later let another bind take the port between.)
func refusingAddr(t testing.TB) (addr string, listen func() net.Listener) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	release := func() { syscall.Close(fd) }
	t.Cleanup(release)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	return addr, func() net.Listener {
		t.Helper()
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(s uintptr) {
				serr = syscall.SetsockoptInt(int(s), syscall.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}); err != nil {
				return err
			}
			return serr
		}}
		ln, err := lc.Listen(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatalf("listen on the reserved %s: %v", addr, err)
		}
		return ln
	}
}
