package bus

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"
)

// freePort returns a loopback port nothing listens on now, so a server can
// be restarted on it.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRegistrySurvivesServerRestart stops the NATS server for several
// registry TTLs and starts a new one (which has lost the memory-storage
// bucket) on the same port. While it is down the watcher fails static:
// it keeps the last known workers and says the bus is down. When it is
// back the bucket is recreated, the live worker re-registers and stays;
// a worker that died during the outage leaves within a TTL of the return.
//
// ViaFrontend (workers that log in with per-worker permissions have no
// JetStream) the worker's refreshes reach the recreated bucket through the
// frontend's registrar.
func TestRegistrySurvivesServerRestart(t *testing.T) {
	for _, via := range []bool{false, true} {
		t.Run(map[bool]string{false: "worker writes the bucket", true: "worker via the frontend"}[via], func(t *testing.T) {
			t.Parallel()
			testRegistryRestart(t, via)
		})
	}
}

func testRegistryRestart(t *testing.T, viaFrontend bool) {
	const ttl = time.Second
	port := freePort(t)
	cfg := EmbeddedConfig{Port: port}
	e, err := StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	ctx := t.Context()

	front := openRegistry(t, connect(t, url), ttl)
	var log changeLog
	w, err := front.WatchWorkers(ctx, WatchConfig{OnChange: log.add})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if viaFrontend {
		g, err := front.StartRegistrar()
		if err != nil {
			t.Fatal(err)
		}
		defer g.Subscription().Unsubscribe()
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	worker, err := OpenRegistry(wctx, RegistryConfig{NC: connect(t, url), TTL: ttl, ViaFrontend: viaFrontend, WorkerID: "live"})
	if err != nil {
		t.Fatal(err)
	}
	live, err := worker.Register(ctx, testWorker("live"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	dying, err := worker.Register(ctx, testWorker("dying"))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "both registered", func() bool { return len(w.Workers()) == 2 })

	e.Close()
	eventually(t, 5*time.Second, "bus reported down", func() bool { down, _, _ := w.BusDown(); return down })
	dying.abandon() // dies while the bus is down: nobody can hear it go
	// Observation window, not synchronisation: three TTLs without NATS.
	time.Sleep(3 * ttl)
	if got := len(w.Workers()); got != 2 {
		t.Fatalf("after 3 TTLs without NATS the view has %d workers, want the 2 last known (fail static)", got)
	}

	e2, err := StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e2.Close() })
	back := time.Now()
	eventually(t, 10*time.Second, "bus reported up", func() bool { down, _, _ := w.BusDown(); return !down })
	eventually(t, 10*time.Second, "dying worker gone", func() bool { _, ok := w.Worker("dying"); return !ok })
	if el := time.Since(back); el > 5*time.Second {
		t.Errorf("dead worker left %v after NATS returned, want about a TTL (%v) plus reconnect", el, ttl)
	}
	// The live worker re-registered into the recreated bucket and survives
	// several TTLs on its refreshes alone.
	time.Sleep(2 * ttl) // observation window
	if _, ok := w.Worker("live"); !ok {
		t.Fatalf("live worker dropped after the restart")
	}
	if log.has(WorkerRemoved, "live") {
		t.Errorf("live worker was removed at some point; want it routable throughout")
	}
	if _, err := front.bucket().Get(ctx, "live"); err != nil {
		t.Errorf("live worker's entry is not in the recreated bucket: %v", err)
	}
}
