package linkemu

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// Shaper is a token bucket: tokens (bytes) accrue at the rate up to the
// burst, and Wait blocks until n bytes' worth are available. A caller may ask
// for more than the burst; the bucket then goes into debt and the caller
// waits until the debt would be repaid, so the long-run rate holds for any
// request size. Safe for concurrent use.
type Shaper struct {
	rate  float64 // bytes per second
	burst float64

	mu     sync.Mutex // guards tokens and last
	tokens float64
	last   time.Time
}

// DefaultBurst returns the burst NewShaper uses when given none: 5 ms of
// traffic, at least 64 KiB. 5 ms keeps pacing smooth at the timer
// resolution Go gets on a busy host; 64 KiB is one typical TCP write.
func DefaultBurst(r Rate) int {
	return max(64<<10, int(float64(r)*0.005))
}

// NewShaper returns a Shaper pacing to rate with the given burst in bytes
// (DefaultBurst when burst <= 0). The bucket starts full. It panics if rate is
// not positive: a zero-rate link is a configuration error caught by ParseRate.
func NewShaper(rate Rate, burst int) *Shaper {
	if rate <= 0 {
		panic("linkemu: NewShaper with non-positive rate")
	}
	if burst <= 0 {
		burst = DefaultBurst(rate)
	}
	return &Shaper{rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// Rate returns the shaper's rate.
func (s *Shaper) Rate() Rate { return Rate(s.rate) }

// Burst returns the bucket size in bytes.
func (s *Shaper) Burst() int { return int(s.burst) }

// Wait blocks until n bytes may be sent, or ctx is done. On cancellation the
// reservation is returned to the bucket.
func (s *Shaper) Wait(ctx context.Context, n int) error {
	dl, _ := ctx.Deadline()
	if err := s.wait(n, dl, ctx.Done()); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("linkemu: wait for %d bytes: %w", n, ctx.Err())
		}
		return err
	}
	return nil
}

// wait reserves n tokens and sleeps until the bucket would have held them.
// It fails without sleeping when the wait would pass deadline (if non-zero),
// and early when done closes.
func (s *Shaper) wait(n int, deadline time.Time, done <-chan struct{}) error {
	if n <= 0 {
		return nil
	}
	s.mu.Lock()
	now := time.Now()
	s.tokens = min(s.burst, s.tokens+now.Sub(s.last).Seconds()*s.rate)
	s.last = now
	s.tokens -= float64(n)
	deficit := -s.tokens
	s.mu.Unlock()
	if deficit <= 0 {
		return nil
	}
	d := time.Duration(deficit / s.rate * float64(time.Second))
	if !deadline.IsZero() && now.Add(d).After(deadline) {
		s.refund(n)
		return fmt.Errorf("linkemu: wait for %d bytes: %w", n, os.ErrDeadlineExceeded)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-done:
		s.refund(n)
		return fmt.Errorf("linkemu: wait for %d bytes: cancelled", n)
	}
}

func (s *Shaper) refund(n int) {
	s.mu.Lock()
	s.tokens = min(s.burst, s.tokens+float64(n))
	s.mu.Unlock()
}

// Conn wraps c so that every Write is paced by s, in pieces no larger than the
// burst. Reads are not shaped: emulate each direction with its own Shaper.
// The wrapper honours write deadlines set through it: a write whose pacing
// would pass the deadline fails with os.ErrDeadlineExceeded.
func Conn(c net.Conn, s *Shaper) net.Conn {
	return &shapedConn{Conn: c, s: s}
}

type shapedConn struct {
	net.Conn
	s *Shaper

	mu sync.Mutex // guards wdl
	// wdl mirrors the write deadline so pacing can respect it.
	wdl time.Time
}

func (c *shapedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *shapedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *shapedConn) Write(p []byte) (int, error) {
	piece := c.s.Burst()
	written := 0
	for written < len(p) {
		n := min(piece, len(p)-written)
		c.mu.Lock()
		dl := c.wdl
		c.mu.Unlock()
		if err := c.s.wait(n, dl, nil); err != nil {
			return written, err
		}
		m, err := c.Conn.Write(p[written : written+n])
		written += m
		if err != nil {
			return written, err
		}
	}
	return written, nil
}
