package frontend

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestMaxInflightSheds: a request beyond --max-inflight, or a sheddable
// one when every worker is at --max-inflight-per-worker, gets 429 with
// Retry-After at once, counted by scope.
func TestMaxInflightSheds(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		scope string
	}{
		{"global", Config{MaxInflight: 1}, "global"},
		{"per worker", Config{MaxInflightPerWorker: 1}, "admission"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newFakeWorker(t, "w-a")
			a.setMode(modeSlow)
			h := newHarness(t, tc.cfg, Deps{}, a.worker(RoleAggregated))
			body := `{"model":"qwen3-0.6b","prompt":"x"}`
			first := make(chan int, 1)
			go func() {
				resp, err := h.srv.Client().Post(h.srv.URL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					first <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				first <- resp.StatusCode
			}()
			waitFor(t, "first request in flight", func() bool { return h.s.inflightCounter("w-a").Load() == 1 })
			start := time.Now()
			resp, got := h.do(t, "POST", "/v1/completions", body, HeaderPriority, "sheddable")
			if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
				t.Errorf("second request: status %d Retry-After %q, want 429 with Retry-After 1: %s", resp.StatusCode, resp.Header.Get("Retry-After"), got)
			}
			if e := decodeError(t, got); e.Type != "rate_limit_error" {
				t.Errorf("error type %q, want rate_limit_error", e.Type)
			}
			if el := time.Since(start); el > fakeSlowDelay/2 {
				t.Errorf("shed answer took %v: it must not wait for a slot", el)
			}
			if got := value(t, h.s.m.shed.WithLabelValues(tc.scope)); got != 1 {
				t.Errorf("shed{%s} = %v, want 1", tc.scope, got)
			}
			if code := <-first; code != 200 {
				t.Errorf("first request: status %d, want 200", code)
			}
			// The slot is free again.
			if resp, got := h.do(t, "POST", "/v1/completions", body); resp.StatusCode != 200 {
				t.Errorf("third request: status %d: %s", resp.StatusCode, got)
			}
		})
	}
}

// TestConnectionLimit: a connection beyond MaxConnections gets 503 with
// Retry-After and is closed; closing one frees its slot.
func TestConnectionLimit(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	h := newHarness(t, Config{MaxConnections: 2}, Deps{}, a.worker(RoleAggregated))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h.s.Handler())
	srv.Listener = h.s.Listener(ln)
	srv.Start()
	t.Cleanup(srv.Close)
	addr := ln.Addr().String()
	var idle []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	waitFor(t, "two connections counted", func() bool { return h.s.conns.Load() == 2 })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("third connection: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("third connection: status %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if got := value(t, h.s.m.connRefused); got != 1 {
		t.Errorf("connections refused = %v, want 1", got)
	}
	idle[0].Close()
	waitFor(t, "slot freed", func() bool { return h.s.conns.Load() == 1 })
	resp2, err := http.Get(srv.URL + "/v1/models")
	if err != nil || resp2.StatusCode != 200 {
		t.Fatalf("request after a slot freed: %v %v", resp2, err)
	}
	resp2.Body.Close()
}

// TestPprofBehindAdmin: /debug/pprof/ exists only when enabled, and then
// only for admin callers.
func TestPprofBehindAdmin(t *testing.T) {
	a := newFakeWorker(t, "w-a")
	off := newHarness(t, Config{}, Deps{}, a.worker(RoleAggregated))
	if resp, _ := off.do(t, "GET", "/debug/pprof/goroutine?debug=1", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("pprof off: status %d, want 404", resp.StatusCode)
	}
	on := newHarness(t, Config{Pprof: true, AdminKey: "adm"}, Deps{}, a.worker(RoleAggregated))
	if resp, _ := on.do(t, "GET", "/debug/pprof/goroutine?debug=1", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("pprof without the admin key: status %d, want 401", resp.StatusCode)
	}
	resp, body := on.do(t, "GET", "/debug/pprof/goroutine?debug=1", "", "Authorization", "Bearer adm")
	if resp.StatusCode != 200 || !strings.Contains(string(body), "goroutine profile") {
		t.Errorf("pprof with the admin key: status %d body %.80q", resp.StatusCode, body)
	}
}
