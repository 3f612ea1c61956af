package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newClient() *Client {
	return &Client{Dial: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, MaxIdlePerHost: 4}
}

// countingServer is an httptest server that counts the connections it
// accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// fetch sends req and reads its whole body, failing t on any error.
func fetch(t *testing.T, c *Client, req *Request) (*Response, string) {
	t.Helper()
	resp, err := c.Do(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func addr(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

func TestContentLengthAndReuse(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo-Id", r.Header.Get("x-request-id"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(r.Method + " " + r.URL.Path + " " + r.Host + " " + string(b)))
	})
	c := newClient()
	defer c.Close()
	for i := 0; i < 5; i++ {
		resp, b := fetch(t, c, &Request{Addr: addr(srv), Path: "/v1/chat", Headers: []Header{{"x-request-id", "r1"}}, Body: []byte(`{"a":1}`)})
		if want := "POST /v1/chat " + addr(srv) + ` {"a":1}`; b != want {
			t.Fatalf("body %q, want %q", b, want)
		}
		if resp.StatusCode != 200 || resp.Header("x-echo-id") != "r1" || resp.Header("CONTENT-TYPE") != "application/json" {
			t.Fatalf("status %d, headers %q", resp.StatusCode, resp.header)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 5 sequential requests, want 1", n)
	}
}

func TestChunkedStreamsWithoutWaiting(t *testing.T) {
	next := make(chan struct{})
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			_, _ = w.Write([]byte("data: x\n\n"))
			w.(http.Flusher).Flush()
			<-next
		}
	})
	c := newClient()
	defer c.Close()
	for round := 0; round < 2; round++ {
		resp, err := c.Do(context.Background(), &Request{Addr: addr(srv), Path: "/"})
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		for i := 0; i < 3; i++ {
			// Each event is readable before the server writes the next:
			// the body never waits for more than it has.
			line, err := br.ReadString('\n')
			if err != nil || line != "data: x\n" {
				t.Fatalf("event %d: %q, %v", i, line, err)
			}
			if _, err := br.ReadString('\n'); err != nil {
				t.Fatal(err)
			}
			next <- struct{}{}
		}
		if b, err := io.ReadAll(br); err != nil || len(b) != 0 {
			t.Fatalf("after the last event: %q, %v", b, err)
		}
		resp.Body.Close()
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// rawServer answers each connection with script, given the request's
// bytes; it returns the listener's address and a count of connections.
func rawServer(t *testing.T, script func(c net.Conn, br *bufio.Reader)) (string, *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				script(c, bufio.NewReader(c))
			}()
		}
	}()
	return ln.Addr().String(), &conns
}

// readRequest consumes one request with a Content-Length body.
func readRequest(br *bufio.Reader) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, req.Body)
	return err
}

func TestInterimTrailersExtensions(t *testing.T) {
	a, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for readRequest(br) == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"+
				"HTTP/1.1 201 Created\r\ncontent-type:text/plain \r\nTransfer-Encoding: chunked\r\n\r\n"+
				"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n")
		}
	})
	c := newClient()
	defer c.Close()
	for i := 0; i < 2; i++ {
		resp, b := fetch(t, c, &Request{Addr: a, Path: "/"})
		if b != "hello world" || resp.StatusCode != 201 || resp.Header("Content-Type") != "text/plain" {
			t.Fatalf("%d %q %q", resp.StatusCode, resp.Header("Content-Type"), b)
		}
	}
}

func TestStaleIdleConnectionRetried(t *testing.T) {
	// The server answers one request per connection and closes it while
	// announcing keep-alive: the pooled connection is dead on reuse.
	a, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(br) == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	c := newClient()
	defer c.Close()
	for i := 0; i < 3; i++ {
		resp, err := c.Do(context.Background(), &Request{Addr: a, Path: "/", Body: []byte("x")})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("request %d: %q", i, b)
		}
		time.Sleep(10 * time.Millisecond) // let the server's close land (the retry covers it if not)
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

func TestNoAnswerOnFreshConnectionFails(t *testing.T) {
	a, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) { _ = readRequest(br) })
	c := newClient()
	defer c.Close()
	_, err := c.Do(context.Background(), &Request{Addr: a, Path: "/"})
	if !errors.Is(err, errNoAnswer) {
		t.Fatalf("err %v, want errNoAnswer", err)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections: a fresh connection's failure is not retried", n)
	}
}

func TestCancelMidBody(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	a, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(br) == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
			<-release
		}
	})
	c := newClient()
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := c.Do(ctx, &Request{Addr: a, Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 64)
	n, err := resp.Body.Read(p)
	if err != nil || string(p[:n]) != "abc" {
		t.Fatalf("%q %v", p[:n], err)
	}
	done := make(chan error, 1)
	go func() { _, err := resp.Body.Read(p); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v, want context.Canceled", err)
	}
	resp.Body.Close()
}

func TestCancelWhileWaitingForHeaders(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	a, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		_ = readRequest(br)
		<-release
	})
	c := newClient()
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := c.Do(ctx, &Request{Addr: a, Path: "/"}); done <- err }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want context.Canceled", err)
	}
}

func TestConnectionCloseAndToEOF(t *testing.T) {
	a, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if readRequest(br) == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
		}
	})
	c := newClient()
	defer c.Close()
	for i := 0; i < 2; i++ {
		if _, b := fetch(t, c, &Request{Addr: a, Path: "/"}); b != "until the end" {
			t.Fatalf("%q", b)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: Connection: close is not reused", n)
	}
}

func TestEarlyCloseDrainsForReuse(t *testing.T) {
	last := make(chan struct{})
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
		w.(http.Flusher).Flush()
		<-last // the terminating chunk comes after the client stopped reading
	})
	c := newClient()
	defer c.Close()
	resp, err := c.Do(context.Background(), &Request{Addr: addr(srv), Path: "/"})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 64)
	if n, err := resp.Body.Read(p); err != nil || string(p[:n]) != "data: [DONE]\n\n" {
		t.Fatalf("%q %v", p[:n], err)
	}
	resp.Body.Close()
	close(last)
	// The drained connection returns to the pool.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		n := len(c.idle[addr(srv)])
		c.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("drained connection never returned to the pool")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fetch(t, c, &Request{Addr: addr(srv), Path: "/"})
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

func TestMalformedAnswers(t *testing.T) {
	for name, answer := range map[string]string{
		"status line":    "HTTP/2 200\r\n\r\n",
		"content-length": "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"chunk size":     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"short body":     "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
	} {
		t.Run(name, func(t *testing.T) {
			a, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
				if readRequest(br) == nil {
					_, _ = io.WriteString(c, answer)
				}
			})
			c := newClient()
			defer c.Close()
			resp, err := c.Do(context.Background(), &Request{Addr: a, Path: "/"})
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestLargeBody(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, strings.Repeat("y", int(n)))
	})
	c := newClient()
	defer c.Close()
	body := []byte(strings.Repeat("x", 300<<10))
	if _, b := fetch(t, c, &Request{Addr: addr(srv), Path: "/", Body: body}); len(b) != len(body) {
		t.Fatalf("%d bytes back", len(b))
	}
}
