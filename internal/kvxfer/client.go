package kvxfer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvpayload"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// TLS, when set, makes the connection TLS; give it a certificate for
	// mutual TLS. ServerName defaults to the dialled host.
	TLS *tls.Config
	// IOTimeout bounds every read and write; default 10 s.
	IOTimeout time.Duration
	// BlockBytes must equal the server's; a mismatch is refused. Required
	// for Pull.
	BlockBytes int
	// ProbeKey is presented before a probe, for a server that requires one
	// (ServerConfig.ProbeKey).
	ProbeKey string
}

// Stats describes one completed pull.
type Stats struct {
	Bytes    int64
	Blocks   int
	Duration time.Duration // from sending the request to the last frame
}

// Client is one connection to a kvxfer server. Its methods are safe for
// concurrent use and run one at a time. After any failure mid-answer the
// connection is closed and every later call fails; dial a new Client.
type Client struct {
	cfg  ClientConfig
	conn net.Conn
	fr   *frameReader
	addr string

	mu     sync.Mutex // serialises requests; guards broken, wbuf
	broken error
	wbuf   []byte

	dlMu      sync.Mutex // guards cancelled; serialises deadline updates
	cancelled bool
}

// Dial connects to a kvxfer server (and completes the TLS handshake when
// configured). ctx bounds the dial and handshake only.
func Dial(ctx context.Context, addr string, cfg ClientConfig) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: cfg.IOTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("kvxfer: dial %s: %w", addr, err)
	}
	if cfg.TLS != nil {
		tcfg := cfg.TLS.Clone()
		if tcfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			tcfg.ServerName = host
		}
		tc := tls.Client(conn, tcfg)
		hctx, cancel := context.WithTimeout(ctx, cfg.IOTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			conn.Close()
			return nil, fmt.Errorf("kvxfer: tls handshake with %s: %w", addr, err)
		}
		conn = tc
	}
	return newClient(conn, addr, cfg), nil
}

func (cfg *ClientConfig) setDefaults() error {
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = DefaultIOTimeout
	}
	if cfg.BlockBytes < 0 || cfg.BlockBytes%8 != 0 {
		return fmt.Errorf("kvxfer: block bytes %d: want a multiple of 8", cfg.BlockBytes)
	}
	return nil
}

// newClient wraps an established connection; cfg has its defaults set.
func newClient(conn net.Conn, addr string, cfg ClientConfig) *Client {
	return &Client{cfg: cfg, conn: conn, fr: newFrameReader(conn), addr: addr}
}

// Addr returns the server address the client dialled.
func (c *Client) Addr() string { return c.addr }

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.broken == nil {
		c.broken = errors.New("kvxfer: client closed")
	}
	c.mu.Unlock()
	return c.conn.Close()
}

// begin starts one request: it takes the lock, and arranges for ctx's end to
// interrupt blocked I/O. end must be called with the request's error.
func (c *Client) begin(ctx context.Context) (end func(err error) error, err error) {
	c.mu.Lock()
	if c.broken != nil {
		err := c.broken
		c.mu.Unlock()
		return nil, fmt.Errorf("kvxfer: connection unusable: %w", err)
	}
	c.dlMu.Lock()
	c.cancelled = false
	c.dlMu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		c.dlMu.Lock()
		c.cancelled = true
		c.conn.SetDeadline(time.Unix(1, 0))
		c.dlMu.Unlock()
	})
	return func(err error) error {
		stop()
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", err, ctx.Err())
			}
			c.broken = err
			c.conn.Close()
		}
		c.mu.Unlock()
		return err
	}, nil
}

// arm sets the deadline for the next read or write, unless the request's
// context has already been cancelled.
func (c *Client) arm() {
	c.dlMu.Lock()
	if !c.cancelled {
		c.conn.SetDeadline(time.Now().Add(c.cfg.IOTimeout))
	}
	c.dlMu.Unlock()
}

func (c *Client) send(b []byte) error {
	c.arm()
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("kvxfer: send request: %w", err)
	}
	return nil
}

// next reads one frame, mapping a broken stream to ErrTruncated and an
// oversized frame to ErrCorrupt. An Error frame becomes a *RemoteError.
func (c *Client) next(limit int) (byte, []byte, error) {
	c.arm()
	return readAnswerFrame(c.fr, limit)
}

func readAnswerFrame(fr *frameReader, limit int) (byte, []byte, error) {
	typ, p, err := fr.next(max(limit, maxControlLen))
	switch {
	case err == nil:
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return 0, nil, fmt.Errorf("%w: %w", ErrTruncated, err)
	case errors.Is(err, errFrameTooLong):
		return 0, nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	default:
		return 0, nil, fmt.Errorf("kvxfer: read: %w", err)
	}
	if typ == frameError {
		var e errorFrame
		if err := e.decode(p); err != nil {
			return 0, nil, fmt.Errorf("%w: error frame: %w", ErrCorrupt, err)
		}
		return 0, nil, &RemoteError{Code: e.Code, Msg: e.Msg}
	}
	return typ, p, nil
}

// Pull fetches the blocks with the given hashes under lease, in order. Each
// block is checked against its CRC32C and against kvpayload (its bytes are a
// pure function of its hash); onBlock(hash) runs only after a block passed
// both, and an error from it aborts the pull. A failed pull returns an error
// matching ErrCorrupt, ErrTruncated, ErrRefused (ErrLeaseUnknown,
// ErrLeaseExpired, ErrLeaseUsed) or a network error; the blocks already
// delivered to onBlock were verified, the rest were not delivered.
func (c *Client) Pull(ctx context.Context, lease string, hashes []uint64, onBlock func(hash uint64) error) (Stats, error) {
	if c.cfg.BlockBytes <= 0 {
		return Stats{}, errors.New("kvxfer: pull: ClientConfig.BlockBytes not set")
	}
	if len(lease) > maxLeaseLen {
		return Stats{}, fmt.Errorf("kvxfer: pull: lease token of %d bytes, at most %d", len(lease), maxLeaseLen)
	}
	if 8*len(hashes) > maxRequestLen-64 {
		return Stats{}, fmt.Errorf("kvxfer: pull: %d blocks in one request, at most %d", len(hashes), (maxRequestLen-64)/8)
	}
	end, err := c.begin(ctx)
	if err != nil {
		return Stats{}, err
	}
	start := time.Now()
	req := pullRequest{BlockBytes: uint32(c.cfg.BlockBytes), Lease: lease, Hashes: hashes}
	c.wbuf = req.appendTo(c.wbuf[:0])
	if err := c.send(c.wbuf); err != nil {
		return Stats{}, end(err)
	}
	st := Stats{}
	err = receiveBlocks(c.next, hashes, c.cfg.BlockBytes, true, func(h uint64) error {
		st.Blocks++
		st.Bytes += int64(c.cfg.BlockBytes)
		if onBlock != nil {
			return onBlock(h)
		}
		return nil
	})
	st.Duration = time.Since(start)
	if err != nil {
		return st, end(fmt.Errorf("kvxfer: pull %d blocks from %s: %w", len(hashes), c.addr, err))
	}
	return st, end(nil)
}

// errCallback wraps an error returned by the caller's onBlock so it is not
// mistaken for a stream fault.
type errCallback struct{ err error }

func (e errCallback) Error() string { return "block callback: " + e.err.Error() }
func (e errCallback) Unwrap() error { return e.err }

// receiveBlocks reads a complete answer of len(hashes) blocks of size bytes
// each, then Done. verify adds the kvpayload check to the CRC. It is the
// client's whole frame decoder, and the fuzz target drives it directly.
func receiveBlocks(next func(limit int) (byte, []byte, error), hashes []uint64, size int, verify bool, onBlock func(uint64) error) error {
	var total uint64
	for i, want := range hashes {
		typ, p, err := next(maxControlLen)
		if err != nil {
			return err
		}
		var bs blockStart
		if typ != frameBlockStart || bs.decode(p) != nil {
			return fmt.Errorf("%w: block %d: got frame type 0x%02x, want BlockStart", ErrCorrupt, i, typ)
		}
		if bs.Index != uint32(i) || bs.Hash != want || int(bs.Size) != size {
			return fmt.Errorf("%w: block %d: server announced index %d hash %016x size %d, want %016x size %d",
				ErrCorrupt, i, bs.Index, bs.Hash, bs.Size, want, size)
		}
		var crc uint32
		for off := 0; off < size; {
			typ, p, err := next(min(MaxChunkSize, size-off))
			if err != nil {
				return err
			}
			if typ != frameData || len(p) == 0 || len(p) > size-off {
				return fmt.Errorf("%w: block %016x at byte %d of %d: got frame type 0x%02x (%d bytes), want Data", ErrCorrupt, want, off, size, typ, len(p))
			}
			if off%8 != 0 {
				// kvpayload works in 8-byte words; the server only ever
				// sends chunks that are multiples of 8 before a block's end.
				return fmt.Errorf("%w: block %016x: data frame at unaligned offset %d", ErrCorrupt, want, off)
			}
			crc = crc32.Update(crc, castagnoli, p)
			if verify {
				if err := kvpayload.Verify(want, off, p); err != nil {
					return fmt.Errorf("%w: %w", ErrCorrupt, err)
				}
			}
			off += len(p)
		}
		typ, p, err = next(maxControlLen)
		if err != nil {
			return err
		}
		var be blockEnd
		if typ != frameBlockEnd || be.decode(p) != nil {
			return fmt.Errorf("%w: block %016x: got frame type 0x%02x, want BlockEnd", ErrCorrupt, want, typ)
		}
		if be.CRC != crc {
			return fmt.Errorf("%w: block %016x: crc32c %08x, sender says %08x", ErrCorrupt, want, crc, be.CRC)
		}
		total += uint64(size)
		if err := onBlock(want); err != nil {
			return errCallback{err}
		}
	}
	typ, p, err := next(maxControlLen)
	if err != nil {
		return err
	}
	var d done
	if typ != frameDone || d.decode(p) != nil {
		return fmt.Errorf("%w: got frame type 0x%02x, want Done", ErrCorrupt, typ)
	}
	if int(d.Blocks) != len(hashes) || d.Bytes != total {
		return fmt.Errorf("%w: Done says %d blocks %d bytes, received %d blocks %d bytes", ErrCorrupt, d.Blocks, d.Bytes, len(hashes), total)
	}
	return nil
}

// Ping measures one round trip.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	end, err := c.begin(ctx)
	if err != nil {
		return 0, err
	}
	rtt, err := c.ping()
	return rtt, end(err)
}

func (c *Client) ping() (time.Duration, error) {
	req := ping{Nonce: rand.Uint64()}
	start := time.Now()
	c.wbuf = req.appendTo(c.wbuf[:0], framePing)
	if err := c.send(c.wbuf); err != nil {
		return 0, err
	}
	typ, p, err := c.next(maxControlLen)
	if err != nil {
		return 0, fmt.Errorf("kvxfer: ping: %w", err)
	}
	var resp ping
	if typ != framePong || resp.decode(p) != nil || resp.Nonce != req.Nonce {
		return 0, fmt.Errorf("%w: ping: bad pong (type 0x%02x)", ErrCorrupt, typ)
	}
	return time.Since(start), nil
}

// Probe measures the link from the server to this client: the best of three
// pings, then nbytes of generated payload streamed by the server (CRC32C
// checked, not kvpayload-verified, so the figure is the link's and not this
// host's CPU). Throughput is nbytes over the transfer time less one round
// trip (the request's trip and the first byte's).
func (c *Client) Probe(ctx context.Context, nbytes int64) (bytesPerSec float64, rtt time.Duration, err error) {
	if nbytes <= 0 {
		return 0, 0, fmt.Errorf("kvxfer: probe of %d bytes: want > 0", nbytes)
	}
	end, err := c.begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	rtt = time.Duration(1<<63 - 1)
	for range 3 {
		r, err := c.ping()
		if err != nil {
			return 0, 0, end(err)
		}
		rtt = min(rtt, r)
	}
	start := time.Now()
	req := probeRequest{N: uint64(nbytes)}
	c.wbuf = c.wbuf[:0]
	if k := c.cfg.ProbeKey; k != "" {
		c.wbuf = append(appendHeader(c.wbuf, frameAuth, len(k)), k...)
	}
	c.wbuf = req.appendTo(c.wbuf)
	if err := c.send(c.wbuf); err != nil {
		return 0, 0, end(err)
	}
	err = receiveBlocks(c.next, []uint64{probeHash}, int(nbytes), false, func(uint64) error { return nil })
	elapsed := time.Since(start)
	if err != nil {
		return 0, 0, end(fmt.Errorf("kvxfer: probe %d bytes from %s: %w", nbytes, c.addr, err))
	}
	if elapsed > 2*rtt {
		elapsed -= rtt
	}
	return float64(nbytes) / elapsed.Seconds(), rtt, end(nil)
}
