package h1

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// response is the handler's http.ResponseWriter. It holds the body until
// the handler flushes or writes more than a buffer: an answer that ends
// before either gets a Content-Length, anything else is chunked (or, to an
// HTTP/1.0 client, ends with the connection).
type response struct {
	c    *conn
	req  *http.Request
	body body

	status      int
	wroteHeader bool // the final status is set and the header snapshotted
	committed   bool // the status line and header are in the write buffer
	chunked     bool
	bodyAllowed bool
	head        bool
	hasType     bool // the handler set Content-Type (or suppressed it)
	hasDate     bool
	closeAfter  bool
	deadlines   bool  // the handler set a deadline on the connection
	length      int64 // the handler's Content-Length, or -1
	written     int64
	err         error // a write to the client failed
	ended       bool  // EndBody sent the whole answer
}

// ErrBodyEnded is a write after EndBody.
var ErrBodyEnded = errors.New("h1: write after the body was ended")

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
)

// preBytes bounds the body held before the header is written (net/http
// holds 2 KiB; a non-streamed chat completion fits in 4).
const preBytes = 4 << 10

func (c *conn) newResponse(req *http.Request) *response {
	if c.header == nil {
		c.header = make(http.Header, 8)
		c.pre = make([]byte, 0, preBytes)
	} else {
		clear(c.header)
		c.pre = c.pre[:0]
	}
	c.hdr = c.hdr[:0]
	w := &response{c: c, req: req, length: -1, head: req.Method == http.MethodHead}
	return w
}

func (w *response) Header() http.Header { return w.c.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	h := w.c.header
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		// An interim answer (103 Early Hints): written at once, and the
		// handler's header stays for the final one.
		w.c.hdr = appendStatus(w.c.hdr[:0], code)
		w.c.hdr = appendHeader(w.c.hdr, h, nil)
		w.c.hdr = append(w.c.hdr, "\r\n"...)
		_, err := w.c.bw.Write(w.c.hdr)
		if err == nil {
			err = w.c.bw.Flush()
		}
		w.fail(err)
		w.c.hdr = w.c.hdr[:0]
		return
	}
	w.wroteHeader, w.status = true, code
	w.bodyAllowed = code != http.StatusNoContent && code != http.StatusNotModified && code >= 200
	if v := h["Content-Length"]; len(v) > 0 {
		if n, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64); err == nil && n >= 0 {
			w.length = n
		}
	}
	for _, v := range h["Connection"] {
		if hasToken(v, "close") {
			w.closeAfter = true
		}
	}
	_, w.hasType = h["Content-Type"]
	_, w.hasDate = h["Date"]
	// The snapshot net/http takes: later changes to the map do not reach
	// the wire. Framing headers are the server's to write.
	w.c.hdr = appendHeader(w.c.hdr[:0], h, framing)
}

var framing = map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Connection": true}

func (w *response) Write(p []byte) (int, error) {
	if w.ended {
		return 0, ErrBodyEnded
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if !w.bodyAllowed {
		return 0, http.ErrBodyNotAllowed
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.head {
		return len(p), nil
	}
	if w.holds(len(p)) {
		w.c.pre = append(w.c.pre, p...)
		return len(p), nil
	}
	if !w.committed {
		sniff := w.c.pre
		if len(sniff) == 0 {
			sniff = p
		}
		w.commit(sniff, false)
	}
	w.writeBody(w.c.pre)
	w.c.pre = w.c.pre[:0]
	if w.holds(len(p)) {
		w.c.pre = append(w.c.pre, p...)
	} else {
		w.writeBody(p)
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// holds reports whether n more bytes go into pre: before the header is
// written, and after it for a chunked body, so that the handler's writes
// between two flushes make one chunk (an SSE relay writes line by line).
func (w *response) holds(n int) bool {
	return len(w.c.pre)+n <= preBytes && (!w.committed || w.chunked)
}

// WriteString saves io.WriteString a copy.
func (w *response) WriteString(s string) (int, error) {
	if w.ended {
		return 0, ErrBodyEnded
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.holds(len(s)) && w.bodyAllowed && !w.head && w.err == nil &&
		(w.length < 0 || w.written+int64(len(s)) <= w.length) {
		w.c.pre = append(w.c.pre, s...)
		w.written += int64(len(s))
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// commit writes the status line and header into the write buffer, framing
// the body: final means the handler has returned and the body is all in
// pre.
func (w *response) commit(sniff []byte, final bool) {
	c := w.c
	w.committed = true
	if w.req.Close || c.s.shutdown.Load() {
		w.closeAfter = true
	}
	http11 := w.req.ProtoAtLeast(1, 1)
	if !http11 && !hasToken(w.req.Header.Get("Connection"), "keep-alive") {
		w.closeAfter = true
	}
	buf := appendStatus(c.bw.AvailableBuffer(), w.status)
	buf = append(buf, c.hdr...)
	switch {
	case !w.bodyAllowed:
	case w.head:
		if w.length >= 0 {
			buf = appendLength(buf, w.length)
		} else if final {
			buf = appendLength(buf, w.written)
		}
	case w.length >= 0:
		buf = appendLength(buf, w.length)
	case final:
		buf = appendLength(buf, int64(len(c.pre)))
	case http11:
		w.chunked = true
		buf = append(buf, "Transfer-Encoding: chunked\r\n"...)
	default:
		w.closeAfter = true // the body ends with the connection
	}
	if !w.hasType && w.bodyAllowed && len(sniff) > 0 && !w.head {
		buf = append(buf, "Content-Type: "...)
		buf = append(buf, http.DetectContentType(sniff)...)
		buf = append(buf, "\r\n"...)
	}
	if !w.hasDate {
		buf = append(buf, dateLine()...)
	}
	if w.closeAfter {
		buf = append(buf, "Connection: close\r\n"...)
	} else if !http11 {
		buf = append(buf, "Connection: keep-alive\r\n"...)
	}
	buf = append(buf, "\r\n"...)
	_, err := c.bw.Write(buf)
	w.fail(err)
}

func (w *response) writeBody(p []byte) {
	if len(p) == 0 || w.err != nil {
		return
	}
	bw := w.c.bw
	if w.chunked {
		buf := strconv.AppendInt(bw.AvailableBuffer(), int64(len(p)), 16)
		buf = append(buf, "\r\n"...)
		if _, err := bw.Write(buf); err != nil {
			w.fail(err)
			return
		}
		if _, err := bw.Write(p); err != nil {
			w.fail(err)
			return
		}
		_, err := bw.WriteString("\r\n")
		w.fail(err)
		return
	}
	_, err := bw.Write(p)
	w.fail(err)
}

func (w *response) fail(err error) {
	if err != nil && w.err == nil {
		w.err = err
	}
}

// writePre moves the held body into the write buffer, writing the header
// first if it is not yet (final: the handler has returned).
func (w *response) writePre(final bool) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(w.c.pre, final)
	}
	w.writeBody(w.c.pre)
	w.c.pre = w.c.pre[:0]
}

// Flush writes what the handler has written to the client.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController, with the write's error.
func (w *response) FlushError() error {
	if w.ended {
		return w.err
	}
	w.writePre(false)
	if w.err != nil {
		return w.err
	}
	w.fail(w.c.bw.Flush())
	return w.err
}

// SetReadDeadline is for http.ResponseController.
func (w *response) SetReadDeadline(t time.Time) error {
	w.deadlines = true
	return w.c.nc.SetReadDeadline(t)
}

// SetWriteDeadline is for http.ResponseController.
func (w *response) SetWriteDeadline(t time.Time) error {
	w.deadlines = true
	return w.c.nc.SetWriteDeadline(t)
}

// EndBody sends the rest of the answer and ends it (the last chunk of a
// chunked body, or a Content-Length when nothing was sent yet) before the
// handler returns, so that work the handler does after its answer is
// complete does not delay the client. Later writes fail with ErrBodyEnded.
func (w *response) EndBody() error {
	if w.ended {
		return w.err
	}
	w.end()
	w.ended = true
	if w.err == nil {
		w.fail(w.c.bw.Flush())
	}
	return w.err
}

// end moves the rest of the body into the write buffer, framing its end.
func (w *response) end() {
	w.writePre(true)
	if w.chunked && w.err == nil {
		_, err := w.c.bw.WriteString("0\r\n\r\n")
		w.fail(err)
	}
}

// finish ends the answer once the handler has returned; it reports
// whether the connection can take another request.
func (w *response) finish() bool {
	if !w.ended {
		w.end()
	}
	if w.length >= 0 && w.written < w.length && w.bodyAllowed && !w.head {
		w.closeAfter = true // the client waits for bytes that will not come
	}
	if w.err == nil {
		w.fail(w.c.bw.Flush())
	}
	if w.deadlines {
		_ = w.c.nc.SetWriteDeadline(time.Time{})
	}
	if w.err != nil || w.closeAfter || w.c.clientGone() {
		return false
	}
	return w.body.discard()
}

// appendStatus appends the status line.
func appendStatus(b []byte, code int) []byte {
	if code == http.StatusOK {
		return append(b, "HTTP/1.1 200 OK\r\n"...)
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if text := http.StatusText(code); text != "" {
		b = append(b, text...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

// appendHeader appends h's lines, leaving out the keys in skip. A value's
// line breaks become spaces, as net/http writes them, so that no handler
// can split the header.
func appendHeader(b []byte, h http.Header, skip map[string]bool) []byte {
	for k, vs := range h {
		if skip[k] {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			b = append(b, strings.TrimSpace(v)...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

func appendLength(b []byte, n int64) []byte {
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, n, 10)
	return append(b, "\r\n"...)
}

// hasToken reports whether the comma-separated header value v holds token,
// compared without regard to case.
func hasToken(v, token string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(part), token) {
			return true
		}
	}
	return false
}

// dateLine is the Date header line, formatted once a second.
func dateLine() []byte {
	now := time.Now().Unix()
	if d := cachedDate.Load(); d != nil && d.sec == now {
		return d.line
	}
	d := &date{sec: now, line: []byte("Date: " + time.Unix(now, 0).UTC().Format(http.TimeFormat) + "\r\n")}
	cachedDate.Store(d)
	return d.line
}

type date struct {
	sec  int64
	line []byte
}

var cachedDate atomic.Pointer[date]
