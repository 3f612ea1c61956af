package frontend

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// endlessWorker streams chat chunks until its request is cancelled, and
// closes cancelled then.
func endlessWorker(t testing.TB, id string) (Worker, <-chan struct{}) {
	t.Helper()
	cancelled := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		chunk := []byte(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("tok ", 64) + `"}}]}` + "\n\n")
		// As fast as it can: the frontend's socket buffers fill at once,
		// so the test measures the stall timeout, not the kernel's buffers.
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				break
			}
			w.(http.Flusher).Flush()
		}
		close(cancelled)
	}))
	t.Cleanup(srv.Close)
	return Worker{ID: id, Role: RoleAggregated, Model: testModel, URL: srv.URL, MaxModelLen: 4096}, cancelled
}

// TestStalledClientCancelsUpstream: a client that sends a streaming request
// and never reads the answer is cut off after the stall timeout, and the
// worker's request is cancelled instead of generating for nobody.
func TestStalledClientCancelsUpstream(t *testing.T) {
	wk, cancelled := endlessWorker(t, "w-a")
	h := newHarness(t, Config{ClientStallTimeout: 300 * time.Millisecond}, Deps{}, wk)
	c, err := net.Dial("tcp", strings.TrimPrefix(h.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096) // a reader that stopped: its window fills soon
	body := `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"hi"}],"stream":true}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	select {
	case <-cancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("worker still generating 20 s after the client stopped reading (stall timeout 300 ms)")
	}
	waitFor(t, "request finished on the frontend", func() bool { return h.s.inflightCounter("w-a").Load() == 0 })
	if got := value(t, h.s.m.errors.WithLabelValues(errKindClientSlow)); got != 1 {
		t.Errorf("errors{client_slow} = %v, want 1", got)
	}
}

// TestSlowBodyGets408: a client that trickles its request body is cut off
// after the read timeout with a 408.
func TestSlowBodyGets408(t *testing.T) {
	b := newFakeWorker(t, "w-b")
	h := newHarness(t, Config{ClientReadTimeout: 200 * time.Millisecond}, Deps{}, b.worker(RoleAggregated))
	c, err := net.Dial("tcp", strings.TrimPrefix(h.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status %d, want 408", resp.StatusCode)
	}
	if n := len(b.received()); n != 0 {
		t.Errorf("worker got %d requests, want 0", n)
	}
}
