package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

type bodyKind uint8

const (
	bodyNone    bodyKind = iota // no body: 204, 304, Content-Length: 0
	bodyLength                  // Content-Length bytes
	bodyChunked                 // Transfer-Encoding: chunked
	bodyToEOF                   // until the worker closes the connection
)

// drainTimeout and drainMax bound the read of what is left of a body
// closed before its end, so that its connection can be reused: a stream
// relayed up to its last event still has the terminating chunk to come.
const (
	drainTimeout = time.Second
	drainMax     = 256 << 10
)

// body reads a response body off its connection and, at its end, hands
// the connection back to the pool.
type body struct {
	c    *Client
	cn   *conn
	ctx  context.Context
	stop func() bool // unhooks the context's cancellation from cn

	kind     bodyKind
	keep     bool  // the connection may be reused after the body
	left     int64 // bytes left: of the body (bodyLength) or of this chunk
	checkEnd bool  // a chunk's data was read; its CRLF is not
	done     bool  // the body's end was read
	released bool  // cn went back to the pool or was closed
	err      error
}

// frame decides how the body is delimited (RFC 9112 section 6.3).
func (b *body) frame(req *Request, resp *Response) error {
	b.keep = !resp.http10 && !hasToken(resp.Header("Connection"), "close")
	switch {
	case req.Method == "HEAD", resp.StatusCode == 204, resp.StatusCode == 304:
		b.kind = bodyNone
		return nil
	}
	if te := resp.Header("Transfer-Encoding"); te != "" {
		if last := te[strings.LastIndexByte(te, ',')+1:]; strings.EqualFold(strings.TrimSpace(last), "chunked") {
			b.kind = bodyChunked
			return nil
		}
		b.kind, b.keep = bodyToEOF, false
		return nil
	}
	if cl := resp.Header("Content-Length"); cl != "" {
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("upstream: malformed Content-Length %q", cl)
		}
		b.kind, b.left = bodyLength, n
		if n == 0 {
			b.kind = bodyNone
		}
		return nil
	}
	b.kind, b.keep = bodyToEOF, false
	return nil
}

func hasToken(v, token string) bool {
	for v != "" {
		var t string
		t, v, _ = strings.Cut(v, ",")
		if strings.EqualFold(strings.TrimSpace(t), token) {
			return true
		}
	}
	return false
}

// Read reads the body. It returns what is buffered rather than wait for
// more, so that a relay sees every event as soon as it arrives.
func (b *body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.done || b.kind == bodyNone {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var err error
	switch b.kind {
	case bodyLength:
		if int64(len(p)) > b.left {
			p = p[:b.left]
		}
		n, err = b.cn.br.Read(p)
		b.left -= int64(n)
		if b.left == 0 {
			b.finish()
			return n, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	case bodyChunked:
		n, err = b.readChunked(p)
		if err == io.EOF {
			b.finish()
			return n, io.EOF
		}
	case bodyToEOF:
		n, err = b.cn.br.Read(p)
		if err == io.EOF {
			b.finish()
			return n, io.EOF
		}
	}
	if err != nil {
		return n, b.fail(err)
	}
	return n, nil
}

// readChunked decodes chunked data into p. Once it holds some data it
// returns rather than block on the network.
func (b *body) readChunked(p []byte) (int, error) {
	br := b.cn.br
	n := 0
	for n < len(p) {
		if b.checkEnd {
			if n > 0 && br.Buffered() < 2 {
				return n, nil
			}
			c, err := br.ReadByte()
			if err == nil && c == '\r' {
				c, err = br.ReadByte()
			}
			if err != nil {
				return n, unexpected(err)
			}
			if c != '\n' {
				return n, errors.New("upstream: malformed chunked body: no CRLF after a chunk")
			}
			b.checkEnd = false
		}
		if b.left == 0 {
			if n > 0 && !lineBuffered(br) {
				return n, nil
			}
			size, err := chunkSize(br)
			if err != nil {
				return n, err
			}
			if size == 0 {
				if err := skipTrailers(br); err != nil {
					return n, err
				}
				return n, io.EOF
			}
			b.left = size
		}
		m := len(p) - n
		if int64(m) > b.left {
			m = int(b.left)
		}
		k, err := br.Read(p[n : n+m])
		n += k
		b.left -= int64(k)
		if b.left == 0 {
			b.checkEnd = true
		}
		if err != nil {
			return n, unexpected(err)
		}
		if k < m && br.Buffered() == 0 {
			return n, nil
		}
	}
	return n, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// chunkSize reads a chunk-size line: hex digits, maybe extensions.
func chunkSize(br *bufio.Reader) (int64, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return 0, errors.New("upstream: malformed chunked body: chunk-size line too long")
		}
		return 0, unexpected(err)
	}
	line = bytes.TrimRight(line, "\r\n")
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 || len(line) > 15 {
		return 0, fmt.Errorf("upstream: malformed chunk size %q", line)
	}
	var n int64
	for _, c := range line {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, fmt.Errorf("upstream: malformed chunk size %q", line)
		}
		n = n<<4 | int64(c)
	}
	return n, nil
}

// skipTrailers reads the trailer section up to its blank line.
func skipTrailers(br *bufio.Reader) error {
	for total := 0; ; {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == bufio.ErrBufferFull {
				return errors.New("upstream: malformed chunked body: trailer line too long")
			}
			return unexpected(err)
		}
		if total += len(line); total > maxHeaderBytes {
			return fmt.Errorf("upstream: trailers exceed %d bytes", maxHeaderBytes)
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}

// lineBuffered reports whether br holds a whole line.
func lineBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n == 0 {
		return false
	}
	buf, _ := br.Peek(n)
	return bytes.IndexByte(buf, '\n') >= 0
}

// fail records a read error, as the context's error when it caused it,
// and closes the connection.
func (b *body) fail(err error) error {
	if b.ctx.Err() != nil {
		err = b.ctx.Err()
	}
	b.err = err
	b.release(false)
	return err
}

// finish marks the body read to its end.
func (b *body) finish() {
	b.done = true
	b.release(b.keep)
}

// release hands the connection back to the pool if reuse allows and the
// context never touched it, or closes it.
func (b *body) release(reuse bool) {
	if b.released {
		return
	}
	b.released = true
	if !b.stop() {
		reuse = false // the context set a deadline on it
	}
	if reuse {
		b.c.put(b.cn)
	} else {
		b.cn.nc.Close()
	}
}

// Close ends the body. A body not read to its end has its rest read in
// the background (up to drainMax bytes within drainTimeout), so that its
// connection can be reused; past either bound it is closed.
func (b *body) Close() error {
	if b.released {
		return nil
	}
	b.released = true
	// Unhooked from the context first, whatever follows: a context that
	// already fired has set a deadline on the connection.
	if untouched := b.stop(); !untouched || !b.keep || b.kind == bodyToEOF {
		b.cn.nc.Close()
		return nil
	}
	go b.drain()
	return nil
}

func (b *body) drain() {
	cn := b.cn
	if err := cn.nc.SetReadDeadline(time.Now().Add(drainTimeout)); err != nil {
		cn.nc.Close()
		return
	}
	var scratch [4 << 10]byte
	total := 0
	for {
		var n int
		var err error
		switch b.kind {
		case bodyLength:
			p := scratch[:]
			if int64(len(p)) > b.left {
				p = p[:b.left]
			}
			n, err = cn.br.Read(p)
			b.left -= int64(n)
			if b.left == 0 {
				err = io.EOF
			}
		case bodyChunked:
			n, err = b.readChunked(scratch[:])
		}
		total += n
		if err == io.EOF {
			if cn.nc.SetReadDeadline(time.Time{}) == nil {
				b.c.put(cn)
				return
			}
			break
		}
		if err != nil || total > drainMax {
			break
		}
	}
	cn.nc.Close()
}
