// Package h1 is the frontend's HTTP/1.1 server: net/http's Handler,
// ResponseWriter and Flusher on a connection loop with less between the
// socket and the handler.
//
// Measured side by side on a 2-core machine (scripts/bench-proxy.sh), a
// bare Go proxy on net/http's server added about 1.8× what nginx adds to a
// short streamed request, and the same proxy on this loop added what nginx
// adds. Most of the difference is not parsing: net/http starts a goroutine
// per request that reads the connection to notice the client leaving, and
// stops it again (a deadline, a wakeup and a wait) before the next request,
// all on the request's path; its response passes through three buffers.
// This server reads and answers on the connection's goroutine, watches
// for the client leaving only once a request has run for WatchAfter (a
// stream or a long generation, where noticing matters and the watcher's
// cost is off the critical path), and frames the answer in one buffer.
//
// The usual request is parsed in place (parse.go); anything unusual goes
// to http.ReadRequest.
//
// What it serves: HTTP/1.1 and HTTP/1.0 with keep-alive, Content-Length and
// chunked request bodies, Expect: 100-continue, pipelined requests (answered
// in order), Content-Length for answers that end before a flush, chunked
// framing otherwise, HEAD, 1xx interim answers, http.ResponseController's
// Flush and read and write deadlines. What it does not: TLS, HTTP/2,
// Hijack, trailers. Malformed requests get an OpenAI-shaped JSON error and
// the connection is closed.
//
// A Server is safe for concurrent use; each connection is served by one
// goroutine, with a second only while a long request's client is watched.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.1 on listeners. Set Handler; the other fields have
// defaults. Do not change fields after Serve is called.
type Server struct {
	Handler http.Handler
	// HeaderTimeout bounds reading a request's header once its first byte
	// has arrived (10 s when zero).
	HeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no request for
	// this long (60 s when zero).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block (1 MiB when zero, as
	// net/http's).
	MaxHeaderBytes int
	// WatchAfter is how long a request runs before its connection is
	// watched so that the request's context ends when the client goes away
	// (20 ms when zero); it is noticed within twice that. A write to a
	// client that has gone fails whether or not it is watched.
	WatchAfter time.Duration
	// Logger gets handler panics (slog.Default when nil).
	Logger *slog.Logger

	shutdown atomic.Bool
	mu       sync.Mutex // guards lns, conns and sweeping
	lns      map[net.Listener]struct{}
	conns    map[*conn]bool // value: idle, waiting for a request
	sweeping bool
	stop     chan struct{} // closed by Shutdown and Close: the sweeper ends
	// The sweeper parks after a second without requests, so an idle server
	// does not wake 50 times a second; the next request wakes it (one
	// atomic load per request otherwise).
	started atomic.Uint64 // requests armed, ever
	parked  atomic.Bool
	wake    chan struct{}
}

// Serve accepts connections on ln and serves each on its own goroutine. It
// returns http.ErrServerClosed after Shutdown or Close, or the listener's
// error.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln, true) {
		return http.ErrServerClosed
	}
	defer s.track(ln, false)
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors and the like: back off as net/http
			// does, up to a second, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.logger().Warn("h1: accept failed; retrying", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := s.newConn(nc)
		if c == nil {
			_ = nc.Close()
			return http.ErrServerClosed
		}
		go c.serve()
	}
}

// Shutdown stops accepting, closes idle connections and waits for the
// others to finish the request they serve (each closes after its answer).
// When ctx ends first it returns ctx's error and leaves them open: call
// Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Store(true)
	s.mu.Lock()
	for ln := range s.lns {
		_ = ln.Close()
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.stopSweeping()
		s.mu.Unlock()
	}()
	tick := time.NewTicker(10 * time.Millisecond) // well below a request's length
	defer tick.Stop()
	for {
		s.mu.Lock()
		for c, idle := range s.conns {
			if idle {
				_ = c.nc.Close()
			}
		}
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close stops accepting and closes every connection, ending the requests
// they serve.
func (s *Server) Close() error {
	s.shutdown.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.lns {
		_ = ln.Close()
	}
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.stopSweeping()
	return nil
}

func (s *Server) track(ln net.Listener, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.lns, ln)
		return true
	}
	if s.shutdown.Load() {
		return false
	}
	if s.lns == nil {
		s.lns = make(map[net.Listener]struct{})
		s.stop = make(chan struct{})
		s.wake = make(chan struct{}, 1)
	}
	s.lns[ln] = struct{}{}
	if !s.sweeping {
		s.sweeping = true
		go s.sweep(s.stop)
	}
	return true
}

// stopSweeping ends the sweeper; called with mu held.
func (s *Server) stopSweeping() {
	if s.sweeping {
		s.sweeping = false
		close(s.stop)
	}
}

// sweep starts the watcher of every request that has run for WatchAfter.
//
// One ticker for the server rather than a timer per request: arming a
// timer sooner than the runtime's network poller means to wake interrupts
// the poller's thread (an eventfd write and a context switch), and under
// sequential load that was once per request. A ticker fires from the
// poller's own timeout.
func (s *Server) sweep(stop chan struct{}) {
	after := cmp(s.WatchAfter, 20*time.Millisecond)
	tick := time.NewTicker(after)
	defer tick.Stop()
	var due []*conn
	quiet, seen := 0, s.started.Load()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		now := monotonic()
		running := false
		s.mu.Lock()
		for c, idle := range s.conns {
			since := c.since.Load()
			if idle || since == 0 {
				continue
			}
			running = true
			if now-since >= int64(after) {
				due = append(due, c)
			}
		}
		s.mu.Unlock()
		if n := s.started.Load(); running || n != seen {
			quiet, seen = 0, n
		} else if quiet++; quiet >= int(time.Second/after) {
			// Parked until a request is armed: arm reads parked after
			// storing since and started, so either this check sees that
			// request or arm sees parked and wakes the sweeper.
			s.parked.Store(true)
			if s.started.Load() == seen {
				select {
				case <-stop:
					return
				case <-s.wake:
				}
			}
			s.parked.Store(false)
			quiet, seen = 0, s.started.Load()
			tick.Reset(after)
		}
		for i, c := range due {
			c.watchDue()
			due[i] = nil
		}
		due = due[:0]
	}
}

// monotonic is nanoseconds on the monotonic clock.
func monotonic() int64 { return int64(time.Since(epoch)) }

var epoch = time.Now()

func (s *Server) newConn(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutdown.Load() {
		return nil
	}
	if s.conns == nil {
		s.conns = make(map[*conn]bool)
	}
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String()}
	c.cr.nc = nc
	c.br = bufio.NewReaderSize(&c.cr, 4<<10)
	c.bw = bufio.NewWriterSize(nc, 4<<10)
	c.s.conns[c] = true
	return c
}

// setIdle records whether c waits for a request; it reports false when
// the server is shutting down and c should close instead.
func (s *Server) setIdle(c *conn, idle bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.conns[c]; !ok {
		return false
	}
	s.conns[c] = idle
	return !s.shutdown.Load()
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// conn is one client connection.
type conn struct {
	s      *Server
	nc     net.Conn
	remote string
	cr     connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	pre    []byte      // a response's body before its header is written
	header http.Header // the handler's response header, cleared per request
	hdr    []byte      // its lines, as snapshotted at WriteHeader

	// The watcher: a goroutine that reads the connection while a long
	// request runs, to end its context when the client goes away.
	since    atomic.Int64 // when the running request started (monotonic), 0 between requests
	wmu      sync.Mutex   // guards the fields below
	armed    bool         // a request runs and may be watched
	due      bool         // it has run for WatchAfter
	bodyRead bool         // its body is read to the end: the connection is free to read
	watching bool
	wdone    chan struct{}
	cancel   context.CancelFunc
	gone     bool // the watcher saw the client leave
	wbuf     [1]byte
}

// connReader reads the connection for the buffered reader, first returning
// a byte the watcher read, and limits how much a header may take.
type connReader struct {
	nc      net.Conn
	pending int // a byte the watcher read, plus one; zero when none
	limit   int64
	limited bool
}

var errHeaderTooLarge = errors.New("h1: request header too large")

func (r *connReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.pending != 0 {
		p[0] = byte(r.pending - 1)
		r.pending = 0
		return 1, nil
	}
	if r.limited {
		if r.limit <= 0 {
			return 0, errHeaderTooLarge
		}
		if int64(len(p)) > r.limit {
			p = p[:r.limit]
		}
	}
	n, err := r.nc.Read(p)
	r.limit -= int64(n)
	return n, err
}

// aLongTimeAgo is a deadline that has passed: it wakes a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

func (c *conn) serve() {
	defer func() {
		_ = c.nc.Close()
		c.s.forget(c)
	}()
	idle := cmp(c.s.IdleTimeout, 60*time.Second)
	headerTimeout := cmp(c.s.HeaderTimeout, 10*time.Second)
	maxHeader := int64(cmp(c.s.MaxHeaderBytes, 1<<20))
	for {
		// net/http's slack: the buffer may hold body bytes read with the
		// header. Bytes already buffered (pipelined) count against nothing.
		c.cr.limit, c.cr.limited = maxHeader+4096, true
		if c.br.Buffered() == 0 && c.cr.pending == 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(idle))
			if _, err := c.br.Peek(1); err != nil {
				return
			}
		}
		if !c.s.setIdle(c, false) {
			return
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(headerTimeout))
		req, err := readRequest(c.br)
		c.cr.limited = false
		if err != nil {
			c.reject(err)
			return
		}
		_ = c.nc.SetReadDeadline(time.Time{})
		if !c.handle(req) {
			return
		}
		if !c.s.setIdle(c, true) {
			return
		}
	}
}

func cmp[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// reject answers a request that could not be read, unless the client just
// went away or stalled, and the connection closes after.
func (c *conn) reject(err error) {
	var ne net.Error
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return
	}
	status, msg := http.StatusBadRequest, "malformed HTTP request: "+err.Error()
	if errors.Is(err, errHeaderTooLarge) {
		status, msg = http.StatusRequestHeaderFieldsTooLarge, "request header larger than the server allows; send fewer or shorter headers"
	}
	c.writeError(status, msg)
}

// writeError writes a whole JSON error answer and flushes it.
func (c *conn) writeError(status int, msg string) {
	body := fmt.Sprintf(`{"error":{"message":%s,"type":"invalid_request_error","param":null,"code":null}}`, strconv.Quote(msg))
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	fmt.Fprintf(c.bw, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	_ = c.bw.Flush()
}

// handle runs the handler for req and finishes its answer; it reports
// whether the connection can take another request.
func (c *conn) handle(req *http.Request) (keep bool) {
	if req.ProtoAtLeast(1, 1) && req.Host == "" && len(req.Header["Host"]) == 0 {
		c.writeError(http.StatusBadRequest, "missing required Host header")
		return false
	}
	if len(req.Header["Host"]) > 1 {
		c.writeError(http.StatusBadRequest, "more than one Host header")
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req = req.WithContext(ctx)
	req.RemoteAddr = c.remote

	w := c.newResponse(req)
	b := &w.body
	b.c, b.src = c, req.Body
	if req.Body == http.NoBody || req.Body == nil {
		b.eof = true
	} else {
		if e := req.Header.Get("Expect"); e != "" {
			if !req.ProtoAtLeast(1, 1) || !strings.EqualFold(e, "100-continue") {
				c.writeError(http.StatusExpectationFailed, "unsupported Expect header "+strconv.Quote(e))
				return false
			}
			b.needContinue = true
		}
		req.Body = b
	}
	c.arm(cancel, b.eof)
	if !c.run(w, req) {
		c.disarm()
		return false
	}
	c.disarm()
	return w.finish()
}

// run calls the handler, reporting false when it panicked: the answer is
// then cut off and the connection closed, as net/http does.
func (c *conn) run(w *response, req *http.Request) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				c.s.logger().Error("h1: handler panicked", "path", req.URL.Path, "remote", c.remote, "panic", p, "stack", string(debug.Stack()))
			}
			ok = false
		}
	}()
	c.s.Handler.ServeHTTP(w, req)
	return true
}

// arm makes the running request one the sweeper watches once it has run
// for WatchAfter.
func (c *conn) arm(cancel context.CancelFunc, bodyRead bool) {
	c.wmu.Lock()
	c.armed, c.due, c.bodyRead, c.gone, c.cancel = true, false, bodyRead, false, cancel
	c.wmu.Unlock()
	c.since.Store(monotonic())
	s := c.s
	s.started.Add(1)
	if s.parked.Load() && s.parked.CompareAndSwap(true, false) {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

func (c *conn) watchDue() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.armed {
		c.due = true
		c.startWatch()
	}
}

// bodyDone is called when the handler has read the request body to its end.
func (c *conn) bodyDone() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.bodyRead = true
	c.startWatch()
}

// startWatch starts the watcher once the request is due and its body read,
// unless the client has already sent more (it is there, and the bytes are
// the next request's). Called with wmu held.
func (c *conn) startWatch() {
	if !c.armed || !c.due || !c.bodyRead || c.watching || c.br.Buffered() > 0 || c.cr.pending != 0 {
		return
	}
	c.watching = true
	c.wdone = make(chan struct{})
	go c.watch(c.wdone, c.cancel)
}

func (c *conn) watch(done chan struct{}, cancel context.CancelFunc) {
	defer close(done)
	n, err := c.nc.Read(c.wbuf[:])
	if n == 1 {
		// The client sent more, a pipelined request: it is still there.
		c.cr.pending = int(c.wbuf[0]) + 1
		return
	}
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		c.wmu.Lock()
		c.gone = true
		c.wmu.Unlock()
		cancel()
	}
}

// disarm stops the watcher, if it runs, before anything else reads the
// connection.
func (c *conn) disarm() {
	c.since.Store(0)
	c.wmu.Lock()
	c.armed = false
	watching, done := c.watching, c.wdone
	c.watching, c.cancel = false, nil
	c.wmu.Unlock()
	if watching {
		_ = c.nc.SetReadDeadline(aLongTimeAgo)
		<-done
	}
}

// clientGone reports whether the watcher saw the client leave.
func (c *conn) clientGone() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.gone
}

// body is a request body as the handler sees it.
type body struct {
	c            *conn
	src          io.ReadCloser
	eof          bool
	needContinue bool // write 100 Continue before the first read
	err          error
}

func (b *body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.needContinue {
		b.needContinue = false
		if _, err := b.c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n"); err == nil {
			err = b.c.bw.Flush()
			if err != nil {
				b.err = err
				return 0, err
			}
		}
	}
	n, err := b.src.Read(p)
	if err == io.EOF {
		b.eof = true
		b.c.bodyDone()
	} else if err != nil {
		b.err = err
	}
	return n, err
}

// Close leaves the rest of the body to the server, which reads it (within
// a bound) or closes the connection once the answer is written.
func (b *body) Close() error { return nil }

// discard reads what is left of the body so that the connection can take
// the next request; it reports false when that would take too long or too
// much and the connection should close instead.
func (b *body) discard() bool {
	if b.eof {
		return true
	}
	if b.err != nil || b.needContinue {
		// The client waits for 100 Continue that will not come, or the
		// body already failed: what follows on the wire is unknowable.
		return false
	}
	_ = b.c.nc.SetReadDeadline(time.Now().Add(time.Second))
	defer b.c.nc.SetReadDeadline(time.Time{})
	// net/http's bound: drain up to 256 KiB, close past that.
	n, err := io.CopyN(io.Discard, b.src, 256<<10+1)
	return err == io.EOF && n <= 256<<10
}
