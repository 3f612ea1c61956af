//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHostileClients runs slowloris, slow-body and idle keep-alive floods
// and a client that never reads its stream against a real frontend. Each
// flood is cut off by its timeout while a normal client is served, and
// the never-reading client's generation is cancelled on the worker.
func TestHostileClients(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	c := startCluster(t, ns.URL(), 1,
		[]string{"--client-header-timeout", "1s", "--client-read-timeout", "1s", "--client-idle-timeout", "2s", "--client-stall-timeout", "1s",
			"--max-inflight", "8"},
		[]string{"--speedup", "5"})
	addr := strings.TrimPrefix(c.url, "http://")
	const flood = 100

	// closedWithin dials n connections, runs send on each and reports how
	// many the server closed (or answered and closed) within d.
	closedWithin := func(what string, n int, d time.Duration, send func(c net.Conn) error) {
		t.Helper()
		var wg sync.WaitGroup
		var mu sync.Mutex
		closed, slowest := 0, time.Duration(0)
		for i := 0; i < n; i++ {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("%s: dial: %v", what, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				start := time.Now()
				if err := send(conn); err != nil {
					return
				}
				_ = conn.SetReadDeadline(start.Add(d))
				_, err := io.Copy(io.Discard, conn) // returns when the server closes
				if err == nil {
					mu.Lock()
					closed++
					slowest = max(slowest, time.Since(start))
					mu.Unlock()
				}
			}()
		}
		// Meanwhile a normal client is served: the flood holds no in-flight slot.
		if r := chat(t.Context(), c.url, "hello during a "+what, 4); r.err != nil {
			t.Errorf("%s: a normal request failed: %v", what, r.err)
		}
		wg.Wait()
		if closed != n {
			t.Errorf("%s: %d of %d connections closed by the server within %v", what, closed, n, d)
		}
		t.Logf("%s: %d connections, all closed by the server, the last after %v", what, n, slowest.Round(time.Millisecond))
	}

	// Timeouts are 1-2 s; 6 s leaves room for a loaded machine while a
	// frontend without them keeps every connection open indefinitely.
	closedWithin("slowloris", flood, 6*time.Second, func(conn net.Conn) error {
		if _, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"); err != nil {
			return err
		}
		go func() { // a header line every 300 ms, never the end of the headers
			for i := 0; i < 30; i++ {
				time.Sleep(300 * time.Millisecond)
				if _, err := fmt.Fprintf(conn, "X-Slow-%d: y\r\n", i); err != nil {
					return
				}
			}
		}()
		return nil
	})
	closedWithin("slow body", flood, 6*time.Second, func(conn net.Conn) error {
		_, err := io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
		return err
	})
	closedWithin("idle keep-alive", flood, 6*time.Second, func(conn net.Conn) error {
		if _, err := io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	})

	// A client that never reads a long stream: the worker must be freed
	// within about the stall timeout once the buffers fill, not when
	// generation ends (16,000 tokens at --speedup 5 take over 10 s).
	slowBefore := metric(t, c.url, `switchyard_errors_total{kind="client_slow"}`)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"tell a very long story"}],"stream":true,"max_tokens":16000,"ignore_eos":true}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	start := time.Now()
	eventually(t, 10*time.Second, "stream running on w1", func() bool {
		h := c.health(t)
		return len(h.Workers) == 1 && h.Workers[0].InFlight == 1
	})
	eventually(t, 30*time.Second, "w1 freed", func() bool { h := c.health(t); return h.Workers[0].InFlight == 0 })
	freed := time.Since(start)
	if freed > 8*time.Second {
		t.Errorf("worker freed %v after a client stopped reading, want within a few seconds (stall timeout 1 s)", freed)
	}
	if n := metric(t, c.url, `switchyard_errors_total{kind="client_slow"}`) - slowBefore; n != 1 {
		t.Errorf("errors{client_slow} grew by %v for the never-reading client, want 1", n)
	}
	t.Logf("never-reading client: worker freed %v after the request", freed.Round(time.Millisecond))

	// 24 concurrent requests against --max-inflight 8: the excess gets 429
	// with Retry-After at once, each one counted; the rest are served.
	shedBefore := metric(t, c.url, `switchyard_shed_total{scope="global"}`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	retryAfter := true
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := fmt.Sprintf(`{"model":"qwen3-0.6b","messages":[{"role":"user","content":"burst %d"}],"max_tokens":1000}`, i)
			resp, err := http.Post(c.url+"/v1/chat/completions", "application/json", strings.NewReader(b))
			if err != nil {
				t.Errorf("burst request: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			codes[resp.StatusCode]++
			if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
				retryAfter = false
			}
		}()
	}
	wg.Wait()
	shed := metric(t, c.url, `switchyard_shed_total{scope="global"}`) - shedBefore
	if codes[200]+codes[429] != 24 || codes[429] == 0 || codes[200] < 8 || float64(codes[429]) != shed || !retryAfter {
		t.Errorf("burst of 24 at --max-inflight 8: status codes %v, shed metric %v, Retry-After on every 429: %v; want 200s and counted 429s only", codes, shed, retryAfter)
	}
	t.Logf("burst of 24 at --max-inflight 8: %d served, %d shed with 429 (metric %v)", codes[200], codes[429], shed)
}
