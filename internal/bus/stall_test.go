package bus

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// stallProxy forwards TCP to target and, while frozen, passes no byte in
// either direction with every connection left open: a server that hangs.
type stallProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
}

func startStallProxy(t testing.TB, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln}
	p.cond = sync.NewCond(&p.mu)
	var wg sync.WaitGroup
	t.Cleanup(func() { p.set(false); ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(c, u) }()
			go func() { defer wg.Done(); p.pipe(u, c) }()
			t.Cleanup(func() { c.Close(); u.Close() })
		}
	}()
	return p
}

func (p *stallProxy) set(frozen bool) {
	p.mu.Lock()
	p.frozen = frozen
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.frozen {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestWatcherFailsStaticOnStall: a server that stops answering while its
// connection stays open shows as BusStalled within BusProbeEvery +
// BusProbeTimeout (plus a margin for a loaded machine), and no worker
// expires meanwhile though its entry cannot be refreshed for several TTLs;
// once the server answers again the bus is up and the worker still there.
func TestWatcherFailsStaticOnStall(t *testing.T) {
	// The probe paced ten times faster than by default, so that the
	// stall shows well before a 2 s TTL could expire the entry; with the
	// defaults it shows by 1.5 s against a 6 s TTL.
	const ttl = 2 * time.Second
	every, timeout := BusProbeEvery, BusProbeTimeout
	BusProbeEvery, BusProbeTimeout = 50*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { BusProbeEvery, BusProbeTimeout = every, timeout })
	e := startServer(t)
	px := startStallProxy(t, strings.TrimPrefix(e.ClientURL(), "nats://"))
	front := openRegistry(t, connect(t, "nats://"+px.ln.Addr().String()), ttl)
	w, err := front.WatchWorkers(t.Context(), WatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	worker := openRegistry(t, connect(t, e.ClientURL()), ttl)
	g, err := worker.Register(t.Context(), testWorker("w1"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "w1 registered", func() bool { _, ok := w.Worker("w1"); return ok })
	g.abandon() // its entry will not be refreshed again

	px.set(true)
	frozeAt := time.Now()
	eventually(t, 10*time.Second, "bus reported stalled", func() bool { st, _, _ := w.BusState(); return st == BusStalled })
	shown := time.Since(frozeAt)
	if limit := BusProbeEvery + BusProbeTimeout + time.Second; shown > limit {
		t.Errorf("stalled shown %v after the freeze, want within %v", shown, limit)
	}
	time.Sleep(2 * ttl) // observation window: the entry goes stale past its TTL
	if _, ok := w.Worker("w1"); !ok {
		t.Fatalf("w1 expired while the bus was stalled; want fail static")
	}
	px.set(false)
	eventually(t, 10*time.Second, "bus up again", func() bool { st, _, _ := w.BusState(); return st == BusUp })
	t.Logf("stalled shown %v after the freeze", shown.Round(10*time.Millisecond))
}
