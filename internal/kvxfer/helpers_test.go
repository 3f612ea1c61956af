package kvxfer

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// startServer starts a server on loopback and closes it at cleanup.
func startServer(t testing.TB, cfg ServerConfig) *Server {
	t.Helper()
	s := newServer(t, cfg)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// newServer returns a server that is not listening, closed at cleanup.
func newServer(t testing.TB, cfg ServerConfig) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pipeClient connects a client to s over net.Pipe, for tests on the
// synctest clock: a goroutine blocked on loopback TCP is not durably
// blocked, so a bubble's clock would not advance past it, while one blocked
// on a pipe is. Everything the client writes reaches the server delay
// later. Cleanup closes the pipe and waits for the server's side to end.
func pipeClient(t testing.TB, s *Server, cfg ClientConfig, delay time.Duration) *Client {
	t.Helper()
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	cli, srv := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		slot := &connSlot{idle: time.Now()}
		s.mu.Lock()
		s.conns[srv] = slot
		s.mu.Unlock()
		s.serveConn(srv, slot)
		srv.Close()
		s.mu.Lock()
		if s.conns[srv] == slot {
			delete(s.conns, srv)
			if slot.authed {
				s.authed--
			}
		}
		s.mu.Unlock()
	}()
	c := newClient(delayedWrites{cli, delay}, "pipe", cfg)
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	return c
}

// delayedWrites delays each Write by a fixed one-way latency.
type delayedWrites struct {
	net.Conn
	delay time.Duration
}

func (d delayedWrites) Write(p []byte) (int, error) {
	time.Sleep(d.delay)
	return d.Conn.Write(p)
}

func dial(t testing.TB, addr string, cfg ClientConfig) *Client {
	t.Helper()
	c, err := Dial(context.Background(), addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func randomHashes(seed uint64, n int) []uint64 {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = r.Uint64()
	}
	return hs
}

// releaseCounter counts release calls and signals the first.
type releaseCounter struct {
	n    atomic.Int32
	once sync.Once
	ch   chan struct{}
}

func newReleaseCounter() *releaseCounter { return &releaseCounter{ch: make(chan struct{})} }

func (r *releaseCounter) release() {
	r.n.Add(1)
	r.once.Do(func() { close(r.ch) })
}

func (r *releaseCounter) wait(t testing.TB) {
	t.Helper()
	select {
	case <-r.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("release was not called within 10s")
	}
}

// proxy relays one TCP stream at a time to target, passing the server's
// bytes through mutate, which may change them in place and returns how many
// of them to forward; forwarding fewer than given cuts the stream there.
type proxy struct {
	ln     net.Listener
	target string
	mutate func(pos int64, p []byte) int
	wg     sync.WaitGroup
}

func startProxy(t testing.TB, target string, mutate func(pos int64, p []byte) int) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, mutate: mutate}
	p.wg.Add(1)
	go p.loop()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) loop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			io.Copy(s, c)
			s.Close()
		}()
		go func() {
			defer p.wg.Done()
			defer c.Close()
			defer s.Close()
			buf := make([]byte, 32<<10)
			var pos int64
			for {
				n, err := s.Read(buf)
				if n > 0 {
					keep := p.mutate(pos, buf[:n])
					if _, werr := c.Write(buf[:keep]); werr != nil || keep < n {
						return
					}
					pos += int64(n)
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// flipAt returns a mutation that inverts the byte at stream position at.
func flipAt(at int64) func(int64, []byte) int {
	return func(pos int64, p []byte) int {
		if at >= pos && at < pos+int64(len(p)) {
			p[at-pos] ^= 0xff
		}
		return len(p)
	}
}

// cutAt returns a mutation that ends the stream after at bytes.
func cutAt(at int64) func(int64, []byte) int {
	return func(pos int64, p []byte) int {
		if at < pos+int64(len(p)) {
			return int(max(0, at-pos))
		}
		return len(p)
	}
}
