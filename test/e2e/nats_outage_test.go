//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// natsOutage runs a frontend and three workers on an external nats-server,
// kills the server for down under bounded load, restarts it on the same
// port (JetStream state lost, as with any memory-storage bucket) and
// returns the load's results and how long after the restart routing by KV
// events was back (bus up, three workers with healthy events).
func natsOutage(t *testing.T, down time.Duration) (all []result, recovered time.Duration, c *cluster) {
	ns := startNATS(t)
	c = startCluster(t, ns.URL(), 3, []string{"--header-timeout", "10s"}, []string{"--speedup", "20"})
	g := startLoad(c.url, 4, 100000, 8)
	// Some load before the fault, so the workers hold prefixes.
	eventually(t, 20*time.Second, "load running", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.results) >= 20
	})
	ns.kill()
	killed := time.Now()
	eventually(t, 10*time.Second, "/health says bus: down", func() bool { return c.health(t).Bus == "down" })
	time.Sleep(time.Until(killed.Add(down))) // the outage itself
	ns.start()
	back := time.Now()
	eventually(t, 30*time.Second, "routing by KV events back", func() bool { return c.health(t).healthy(3) })
	recovered = time.Since(back)
	// Keep the load on past the recovery, then stop it.
	time.Sleep(2 * time.Second)
	all = g.finish()
	t.Logf("NATS down %v: %d requests, routing by KV events back %v after NATS returned", down, len(all), recovered.Round(10*time.Millisecond))
	return all, recovered, c
}

// TestNATSBlip: a 2 s NATS blip under load loses no request, and the
// workers never leave routing.
func TestNATSBlip(t *testing.T) {
	t.Parallel()
	all, recovered, c := natsOutage(t, 2*time.Second)
	for i, r := range all {
		if r.err != nil {
			t.Errorf("request %d (at %s) failed: %v", i, r.at.Format("15:04:05.000"), r.err)
		}
	}
	if recovered > 5*time.Second {
		t.Errorf("routing by KV events back %v after NATS returned, want within 5 s", recovered)
	}
	// A request after recovery is routed by the index, not the approximation.
	r := chat(context.Background(), c.url, "client 0 asks about item 0 of the fault drill. ", 4)
	if r.err != nil || r.source != "index" {
		t.Errorf("request after recovery: source %q, err %v; want routed by the index", r.source, r.err)
	}
}

// TestNATSOutage: after a 15 s outage under load, during which requests
// keep being served by the last known workers, routing by KV events is
// back within 5 s of NATS returning.
func TestNATSOutage(t *testing.T) {
	t.Parallel()
	all, recovered, _ := natsOutage(t, 15*time.Second)
	failed := 0
	for _, r := range all {
		if r.err != nil {
			failed++
			t.Logf("failed at %s: %v", r.at.Format("15:04:05.000"), r.err)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d requests failed across a 15 s NATS outage; want 0 (fail static to the last known workers)", failed, len(all))
	}
	if recovered > 5*time.Second {
		t.Errorf("routing by KV events back %v after NATS returned, want within 5 s", recovered)
	}
}

// TestNATSRestartWithLogins: with per-worker logins on an external server
// a worker may not create the registry bucket, so after a restart it waits
// for the frontend to recreate it; it must be back in routing and stay.
func TestNATSRestartWithLogins(t *testing.T) {
	t.Parallel()
	l := newNATSLogin(t)
	var conf bytes.Buffer
	cmd := exec.Command(binary(t), "nats-config", "--secret-file", l.secretFile, "--workers", "w1")
	cmd.Stdout = &conf
	if err := cmd.Run(); err != nil {
		t.Fatalf("nats-config: %v", err)
	}
	ns := startNATSConf(t, conf.String())
	withCreds := strings.Replace(ns.URL(), "nats://", "nats://frontend:"+bus.Password(l.secret, bus.UserFrontend)+"@", 1)
	_, m := start(t, readyURL, "frontend", "--http-addr", "127.0.0.1:0", "--nats", withCreds, "--registry-ttl", "2s")
	c := &cluster{url: m[1]}
	start(t, readyURL, append([]string{"worker", "--nats", ns.URL(), "--id", "w1", "--http-addr", "127.0.0.1:0", "--registry-ttl", "2s"}, l.workerArgs(t, "w1")...)...)
	c.waitHealthy(t, 1, 30*time.Second)

	ns.kill()
	eventually(t, 10*time.Second, "/health says bus: down", func() bool { return c.health(t).Bus == "down" })
	time.Sleep(3 * time.Second) // longer than the registry TTL
	if r := chat(context.Background(), c.url, "while NATS is down", 4); r.err != nil {
		t.Errorf("request while NATS is down: %v", r.err)
	}
	ns.start()
	back := time.Now()
	c.waitHealthy(t, 1, 20*time.Second)
	t.Logf("with logins: w1 routed by KV events again %v after NATS returned", time.Since(back).Round(10*time.Millisecond))
	time.Sleep(3 * time.Second) // observation window: w1's entry must be refreshed in the new bucket
	if h := c.health(t); !h.healthy(1) {
		t.Errorf("after the restart: bus %s, %d workers; want w1 to stay routable", h.Bus, len(h.Workers))
	}
	if r := chat(context.Background(), c.url, "after the restart", 4); r.err != nil {
		t.Errorf("request after the restart: %v", r.err)
	}
}
