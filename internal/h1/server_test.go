package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serve runs h on a loopback h1 server and returns its address and a count
// of accepted connections.
func serve(t testing.TB, s *Server) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	done := make(chan error, 1)
	go func() { done <- s.Serve(countingListener{ln, &accepted}) }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ln.Addr().String(), &accepted
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// exchange writes raw to a new connection and returns everything the
// server answers until it closes the connection or goes quiet.
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	got, _ := io.ReadAll(c)
	return string(got)
}

func TestKeepAliveFramingAndReuse(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/small":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"echo":"` + string(body) + `"}`))
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				_, _ = io.WriteString(w, "data: "+string(rune('a'+i))+"\n\n")
				w.(http.Flusher).Flush()
			}
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", 10000)))
		case "/none":
			w.WriteHeader(http.StatusNoContent)
		}
	})}
	addr, accepted := serve(t, s)
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	cases := []struct {
		path, body, want string
		chunked          bool
		status           int
	}{
		{"/small", "hi", `{"echo":"hi"}`, false, 200},
		{"/stream", "", "data: a\n\ndata: b\n\ndata: c\n\n", true, 200},
		{"/big", strings.Repeat("y", 100000), strings.Repeat("x", 10000), true, 200},
		{"/none", "", "", false, 204},
		{"/small", "again", `{"echo":"again"}`, false, 200},
	}
	for _, tc := range cases {
		resp, err := c.Post("http://"+addr+tc.path, "text/plain", strings.NewReader(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(got) != tc.want || resp.StatusCode != tc.status {
			t.Errorf("%s: status %d body %q err %v, want %d %q", tc.path, resp.StatusCode, got, err, tc.status, tc.want)
		}
		chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"
		if chunked != tc.chunked {
			t.Errorf("%s: chunked %v, want %v", tc.path, chunked, tc.chunked)
		}
		if !tc.chunked && tc.status == 200 && resp.ContentLength != int64(len(tc.want)) {
			t.Errorf("%s: Content-Length %d, want %d", tc.path, resp.ContentLength, len(tc.want))
		}
		if resp.Header.Get("Date") == "" {
			t.Errorf("%s: no Date header", tc.path)
		}
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("%d connections for %d requests, want 1 (keep-alive)", n, len(cases))
	}
}

func TestRawProtocol(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Evil", "a\r\nInjected: yes")
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(body))
	})}
	addr, _ := serve(t, s)
	cases := []struct {
		name, raw string
		want      []string // substrings of the answer, in order
		not       []string
	}{
		{"pipelined, answered in order",
			"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhiGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			[]string{"HTTP/1.1 200 OK", "Content-Length: 10", "POST /a hi", "HTTP/1.1 200 OK", "Connection: close", "GET /b "}, nil},
		{"chunked request body",
			"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
			[]string{"200 OK", "POST /c abcde"}, nil},
		{"100-continue",
			"POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\nConnection: close\r\n\r\nxyz",
			[]string{"HTTP/1.1 100 Continue\r\n\r\n", "200 OK", "POST /e xyz"}, nil},
		{"HTTP/1.0 closes after the answer",
			"GET /old HTTP/1.0\r\n\r\n",
			[]string{"200 OK", "Connection: close", "GET /old "}, nil},
		{"HEAD has no body",
			"HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			[]string{"200 OK"}, []string{"HEAD /h"}},
		{"header values cannot split the header",
			"GET /i HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			[]string{"X-Evil: a  Injected: yes"}, []string{"\r\nInjected:"}},
		{"malformed request gets a JSON error",
			"NOT HTTP\r\n\r\n",
			[]string{"HTTP/1.1 400 Bad Request", "Content-Type: application/json", `{"error":{"message":"malformed HTTP request`}, nil},
		{"missing Host",
			"GET / HTTP/1.1\r\n\r\n",
			[]string{"400 Bad Request", "missing required Host header"}, nil},
		{"unknown Expect",
			"POST / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 1\r\n\r\nx",
			[]string{"417 Expectation Failed"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := exchange(t, addr, tc.raw)
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("answer lacks %q (in order):\n%s", w, got)
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("answer holds %q:\n%s", n, got)
				}
			}
		})
	}
}

func TestHeaderTooLarge(t *testing.T) {
	addr, _ := serve(t, &Server{MaxHeaderBytes: 1024, Handler: http.NotFoundHandler()})
	got := exchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("b", 8000)+"\r\n\r\n")
	if !strings.HasPrefix(got, "HTTP/1.1 431 ") {
		t.Errorf("got %q, want 431", got)
	}
}

// A client that leaves while its request waits ends the request's context,
// once the request has run for WatchAfter.
func TestClientGoneCancelsContext(t *testing.T) {
	for _, parked := range []bool{false, true} {
		ended := make(chan error, 1)
		started := make(chan struct{})
		s := &Server{WatchAfter: time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			close(started)
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
			case <-time.After(10 * time.Second):
				ended <- errors.New("the context outlived its client")
			}
		})}
		addr, _ := serve(t, s)
		if parked {
			// An idle server's sweeper parks (after a second without
			// requests); the next request must wake it.
			for deadline := time.Now().Add(10 * time.Second); !s.parked.Load(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the sweeper of an idle server never parked")
				}
			}
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
		<-started
		_ = c.Close()
		if err := <-ended; !errors.Is(err, context.Canceled) {
			t.Errorf("parked sweeper %v: handler saw %v, want context.Canceled", parked, err)
		}
	}
}

// The watcher must not take a byte of the next request: a pipelined
// request sent while a long one runs is still answered.
func TestWatcherKeepsPipelinedBytes(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int64
	s := &Server{WatchAfter: time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if calls.Add(1) == 1 {
			<-release
		}
		_, _ = io.WriteString(w, "ok "+r.URL.Path+"\n")
	})}
	addr, _ := serve(t, s)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
	// Let the watcher start on the first request, then pipeline a second.
	deadline := time.Now().Add(5 * time.Second)
	for !watching(s) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !watching(s) {
		t.Fatal("the watcher never started")
	}
	_, _ = io.WriteString(c, "GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	close(release)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	if !strings.Contains(string(got), "ok /first") || !strings.Contains(string(got), "ok /second") {
		t.Errorf("answers: %q, want both requests answered", got)
	}
}

func watching(s *Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.wmu.Lock()
		w := c.watching
		c.wmu.Unlock()
		if w {
			return true
		}
	}
	return false
}

// Shutdown closes idle connections, lets a running request finish (and
// close its connection after), and Serve returns ErrServerClosed.
func TestShutdownWaitsForRunningRequest(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})}
	addr, _ := serve(t, s)
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_, _ = io.WriteString(idle, "GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	} else {
		_, _ = io.ReadAll(resp.Body)
	}
	type answer struct {
		body string
		resp *http.Response
		err  error
	}
	slow := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/slow")
		if err != nil {
			slow <- answer{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		slow <- answer{string(b), resp, err}
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	// The idle connection is closed by Shutdown.
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Error("the idle connection got bytes, want it closed")
	}
	close(release)
	a := <-slow
	if a.err != nil || a.body != "done" || !a.resp.Close {
		t.Errorf("running request: %q err %v, want \"done\" with Connection: close", a.body, a.err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// A panicking handler cuts its answer off and closes the connection; the
// server goes on serving.
func TestPanicClosesConnection(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, "fine")
	})}
	addr, _ := serve(t, s)
	if _, err := http.Get("http://" + addr + "/panic"); err == nil {
		t.Error("a panicking handler's request succeeded")
	}
	resp, err := http.Get("http://" + addr + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "fine" {
		t.Errorf("after a panic: %q", b)
	}
}

// An unread body is drained so the connection is reused; a deadline set
// by a handler does not reach the next request.
func TestUnreadBodyAndDeadlines(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.URL.Path == "/deadline" {
			_ = rc.SetWriteDeadline(time.Now().Add(time.Millisecond))
			_ = rc.SetReadDeadline(time.Now().Add(time.Millisecond))
		}
		_, _ = io.WriteString(w, "ok")
		if err := rc.Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
	})}
	addr, accepted := serve(t, s)
	var reused atomic.Int64
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused.Add(1)
		}
	}}
	c := &http.Client{}
	for _, path := range []string{"/unread", "/deadline", "/after"} {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST",
			"http://"+addr+path, strings.NewReader(strings.Repeat("z", 50000)))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Errorf("%s: %q", path, b)
		}
		time.Sleep(5 * time.Millisecond) // past the handler's deadlines: they must have been lifted
	}
	if accepted.Load() != 1 || reused.Load() != 2 {
		t.Errorf("%d connections, %d reused, want 1 and 2", accepted.Load(), reused.Load())
	}
}

// EndBody sends the whole answer while the handler still runs: the client
// reads it to its end, chunked or with a Content-Length, before the
// handler returns; later writes fail; the connection is reused.
func TestEndBodyBeforeReturn(t *testing.T) {
	release := make(chan struct{})
	writeErr := make(chan error, 2)
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "data: a\n\n")
		if r.URL.Path == "/chunked" {
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		}
		if err := w.(interface{ EndBody() error }).EndBody(); err != nil {
			t.Errorf("EndBody: %v", err)
		}
		_, err := io.WriteString(w, "late")
		writeErr <- err
		<-release
	})}
	addr, accepted := serve(t, s)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	for _, tc := range []struct {
		path, want string
		chunked    bool
	}{
		{"/chunked", "data: a\n\ndata: [DONE]\n\n", true},
		{"/length", "data: a\n\n", false},
	} {
		resp, err := c.Get("http://" + addr + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body) // the handler is still blocked
		resp.Body.Close()
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: body %q err %v, want %q", tc.path, got, err, tc.want)
		}
		if chunked := len(resp.TransferEncoding) > 0; chunked != tc.chunked {
			t.Errorf("%s: chunked %v, want %v", tc.path, chunked, tc.chunked)
		}
		if err := <-writeErr; !errors.Is(err, ErrBodyEnded) {
			t.Errorf("%s: write after EndBody: %v, want ErrBodyEnded", tc.path, err)
		}
		release <- struct{}{}
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("%d connections, want 1 (reused after EndBody)", n)
	}
}
