// Package upstream is the frontend's HTTP/1.1 client for its workers: a
// pool of keep-alive connections and the least a proxy hop needs, on the
// caller's goroutine.
//
// net/http's Transport runs two goroutines per connection and hands every
// request and response between them and the caller over channels; it
// canonicalises and copies every header into maps, and wraps the body in
// three readers. On the frontend's hop that was about a fifth of the CPU
// per request and a third of the wakeups. This client writes the request
// in one system call from the caller's goroutine, reads the answer on the
// same goroutine, keeps the response header block as one string, and
// decodes chunked and Content-Length bodies itself.
//
// It speaks plain HTTP/1.1 only, which is what engine workers serve; the
// frontend keeps net/http for https workers.
package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Header is one request header, written as given.
type Header struct{ Name, Value string }

// Request is one request to a worker.
type Request struct {
	Method  string // "POST" when empty
	Addr    string // host:port to connect to; also the Host header
	Path    string // request target, "/v1/chat/completions"
	Headers []Header
	Body    []byte
	// Sent, when set, is called once the request is written, before its
	// answer is awaited: work the caller can do while the worker works.
	// It is called once (Do clears it), and not if no write succeeds.
	Sent func()
}

// Response is a worker's answer. Body must be closed; a body read to its
// end returns the connection to the pool.
type Response struct {
	StatusCode int
	Body       io.ReadCloser
	header     string // the header lines, "Name: value\r\n" each
	http10     bool
	body       body
}

// Header returns the first value of the named header, compared without
// regard to case, or "".
func (r *Response) Header(name string) string {
	return headerValue(r.header, name)
}

// Client is a pool of HTTP/1.1 connections. The zero value is not usable:
// set Dial.
type Client struct {
	// Dial opens a connection, within ctx.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdlePerHost bounds the idle connections kept per address (2 when
	// zero).
	MaxIdlePerHost int
	// IdleTimeout closes connections idle for longer (90 s when zero).
	IdleTimeout time.Duration

	mu     sync.Mutex
	idle   map[string][]*conn
	closed bool
}

// conn is one connection, owned by the pool while idle and by one
// request otherwise.
type conn struct {
	nc       net.Conn
	br       *bufio.Reader
	wbuf     []byte
	hbuf     []byte
	addr     string
	idleFrom time.Time
}

// probeAfter is how long a connection may sit idle before it is checked
// for a close by the worker before reuse.
const probeAfter = time.Second

// maxHeaderBytes bounds a response's status line and headers.
const maxHeaderBytes = 64 << 10

// errNoAnswer is a connection closed before any byte of an answer: on a
// reused connection, the worker closed it as the request went out.
var errNoAnswer = errors.New("upstream: connection closed before any answer")

// Do sends req and reads the response status and headers. The body is
// read by the caller. Cancelling ctx aborts the request at any point,
// including while the body is read.
//
// A request on a reused connection that fails before any byte of an
// answer is sent once more on a new connection: the worker closed an idle
// connection as the request went out, and has not seen it.
func (c *Client) Do(ctx context.Context, req *Request) (*Response, error) {
	for attempt := 0; ; attempt++ {
		cn, reused, err := c.get(ctx, req.Addr)
		if err != nil {
			return nil, err
		}
		resp, answered, err := c.roundTrip(ctx, cn, req)
		if err == nil {
			return resp, nil
		}
		if reused && !answered && attempt == 0 && ctx.Err() == nil {
			continue
		}
		return nil, err
	}
}

// roundTrip writes req on cn and reads the response head. answered
// reports whether any byte of an answer came, so that a failed reused
// connection can be told from a failed request.
func (c *Client) roundTrip(ctx context.Context, cn *conn, req *Request) (*Response, bool, error) {
	stop := context.AfterFunc(ctx, func() { cn.nc.SetDeadline(aLongTimeAgo) })
	fail := func(err error, answered bool) (*Response, bool, error) {
		stop()
		cn.nc.Close()
		if ctx.Err() != nil {
			return nil, answered, ctx.Err()
		}
		return nil, answered, err
	}
	if err := cn.write(req); err != nil {
		return fail(fmt.Errorf("upstream: write request: %w", err), false)
	}
	if sent := req.Sent; sent != nil {
		req.Sent = nil
		sent()
	}
	resp := &Response{}
	for {
		answered, err := cn.readHead(resp)
		if err != nil {
			return fail(err, answered)
		}
		if resp.StatusCode >= 200 {
			break
		}
		if resp.StatusCode == 101 {
			return fail(errors.New("upstream: unexpected 101 Switching Protocols"), true)
		}
		// 100 Continue, 103 Early Hints: the answer follows.
	}
	b := &resp.body
	b.c, b.cn, b.stop, b.ctx = c, cn, stop, ctx
	if err := b.frame(req, resp); err != nil {
		return fail(err, true)
	}
	resp.Body = b
	if b.kind == bodyNone {
		b.finish()
	}
	return resp, true, nil
}

var aLongTimeAgo = time.Unix(1, 0)

// write sends the request in one write.
func (cn *conn) write(req *Request) error {
	m := req.Method
	if m == "" {
		m = "POST"
	}
	w := cn.wbuf[:0]
	w = append(w, m...)
	w = append(w, ' ')
	w = append(w, req.Path...)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, req.Addr...)
	w = append(w, "\r\n"...)
	for _, h := range req.Headers {
		w = append(w, h.Name...)
		w = append(w, ": "...)
		w = append(w, h.Value...)
		w = append(w, "\r\n"...)
	}
	if req.Body != nil || m == "POST" || m == "PUT" {
		w = append(w, "Content-Length: "...)
		w = strconv.AppendInt(w, int64(len(req.Body)), 10)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	// The body is copied behind the head, even a long one: one write, and
	// req's memory never reaches the connection (so the caller's headers
	// can stay on its stack).
	w = append(w, req.Body...)
	_, err := cn.nc.Write(w)
	if cap(w) <= 256<<10 {
		cn.wbuf = w[:0]
	}
	return err
}

// readHead reads one status line and its headers into resp.
func (cn *conn) readHead(resp *Response) (answered bool, err error) {
	line, err := cn.br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && (err == io.EOF || isReset(err)) {
			return false, errNoAnswer
		}
		return len(line) > 0, fmt.Errorf("upstream: read status line: %w", err)
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return true, fmt.Errorf("upstream: malformed status line %q", bytes.TrimSpace(line))
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil || code < 100 || code > 999 {
		return true, fmt.Errorf("upstream: malformed status line %q", bytes.TrimSpace(line))
	}
	resp.StatusCode = code
	http10 := line[7] == '0'
	h := cn.hbuf[:0]
	for {
		line, err := cn.br.ReadSlice('\n')
		if err != nil {
			return true, fmt.Errorf("upstream: read headers: %w", err)
		}
		if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
			break
		}
		if len(h)+len(line) > maxHeaderBytes {
			return true, fmt.Errorf("upstream: response headers exceed %d bytes", maxHeaderBytes)
		}
		h = append(h, line...)
	}
	resp.header, resp.http10 = string(h), http10
	cn.hbuf = h[:0]
	return true, nil
}

// headerValue finds name in a block of "Name: value\r\n" lines.
func headerValue(block, name string) string {
	for len(block) > 0 {
		i := strings.IndexByte(block, '\n')
		line := block
		if i >= 0 {
			line, block = block[:i], block[i+1:]
		} else {
			block = ""
		}
		c := strings.IndexByte(line, ':')
		if c != len(name) || !strings.EqualFold(line[:c], name) {
			continue
		}
		return strings.Trim(line[c+1:], " \t\r") // optional white space, and the line's CR
	}
	return ""
}

// get takes an idle connection to addr or dials one.
func (c *Client) get(ctx context.Context, addr string) (*conn, bool, error) {
	now := time.Now()
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, false, errors.New("upstream: client closed")
		}
		list := c.idle[addr]
		if len(list) == 0 {
			c.mu.Unlock()
			break
		}
		cn := list[len(list)-1]
		list[len(list)-1] = nil
		c.idle[cn.addr] = list[:len(list)-1] // cn.addr: the key may not keep the caller's string
		c.mu.Unlock()
		idle := now.Sub(cn.idleFrom)
		if idle > c.idleTimeout() || idle > probeAfter && !alive(cn.nc) {
			cn.nc.Close()
			continue
		}
		return cn, true, nil
	}
	// A copy for the connection to keep: the caller's request, headers
	// and all, then stays on its stack.
	own := strings.Clone(addr)
	nc, err := c.Dial(ctx, "tcp", own)
	if err != nil {
		return nil, false, err
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, 16<<10), addr: own}, false, nil
}

func (c *Client) idleTimeout() time.Duration {
	if c.IdleTimeout > 0 {
		return c.IdleTimeout
	}
	return 90 * time.Second
}

// put returns cn to the pool, or closes it when the pool is full.
func (c *Client) put(cn *conn) {
	max := c.MaxIdlePerHost
	if max <= 0 {
		max = 2
	}
	cn.idleFrom = time.Now()
	c.mu.Lock()
	if !c.closed {
		if c.idle == nil {
			c.idle = make(map[string][]*conn)
		}
		if list := c.idle[cn.addr]; len(list) < max {
			c.idle[cn.addr] = append(list, cn)
			c.mu.Unlock()
			return
		}
	}
	c.mu.Unlock()
	cn.nc.Close()
}

// CloseIdle closes the idle connections; the client stays usable.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, list := range idle {
		for _, cn := range list {
			cn.nc.Close()
		}
	}
}

// Close closes the idle connections and refuses new requests.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.CloseIdle()
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
