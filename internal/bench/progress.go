package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress reports a phase's progress on a writer (stderr): a redrawn bar
// when the writer is a terminal, otherwise one line every few seconds so CI
// logs stay readable. A nil *Progress reports nothing. Add is safe for
// concurrent use; Start and Stop are called by one owner, and Stop waits for
// the render goroutine Start began.
type Progress struct {
	w     io.Writer
	tty   bool
	every time.Duration

	done   atomic.Int64
	failed atomic.Int64

	// Set by Start, read by the render goroutine until Stop.
	label string
	total int
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
}

// NewProgress returns a progress reporter writing to w. tty selects the
// redrawn bar; otherwise a line is printed every 5 s.
func NewProgress(w io.Writer, tty bool) *Progress {
	every := 5 * time.Second
	if tty {
		every = 200 * time.Millisecond
	}
	return &Progress{w: w, tty: tty, every: every}
}

// Start begins a phase of total requests.
func (p *Progress) Start(label string, total int) {
	if p == nil {
		return
	}
	p.label, p.total, p.start = label, total, time.Now()
	p.done.Store(0)
	p.failed.Store(0)
	p.stop = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.render(false)
			}
		}
	}()
}

// Add counts one finished request.
func (p *Progress) Add(ok bool) {
	if p == nil {
		return
	}
	p.done.Add(1)
	if !ok {
		p.failed.Add(1)
	}
}

// Stop ends the phase, waits for the render goroutine and prints the final
// state.
func (p *Progress) Stop() {
	if p == nil || p.stop == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.stop = nil
	p.render(true)
}

func (p *Progress) render(final bool) {
	done, failed := p.done.Load(), p.failed.Load()
	el := time.Since(p.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(done) / el
	}
	if !p.tty {
		fmt.Fprintf(p.w, "bench: %s: %d/%d done, %d failed, %.1f req/s, %.0fs\n", p.label, done, p.total, failed, rate, el)
		return
	}
	const width = 30
	fill := 0
	if p.total > 0 {
		fill = int(float64(width) * float64(done) / float64(p.total))
	}
	fill = min(max(fill, 0), width)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r\x1b[K%-14s [%s%s] %d/%d  failed %d  %.1f req/s  %.0fs%s",
		p.label, strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, p.total, failed, rate, el, end)
}

// Note prints one line of information before or between phases; empty
// notes print nothing.
func (p *Progress) Note(s string) {
	if p == nil || s == "" {
		return
	}
	fmt.Fprintf(p.w, "bench: %s\n", s)
}
