//go:build e2e

package e2e

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// cutProxy forwards TCP to target until cut: then it closes every
// connection and refuses new ones until restore, as a network partition
// between one process and the bus would.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex // guards cut and conns
	cut    bool
	conns  map[net.Conn]struct{}
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *cutProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *cutProxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	go func() { io.Copy(up, c); up.Close(); c.Close() }()
	io.Copy(c, up)
	c.Close()
	up.Close()
}

// setCut cuts (closing every connection) or restores the link.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// TestSettingsConvergeAfterPartition: two frontends sharing state on an
// external nats-server; one is cut off from the bus for 15 s while the
// operator changes the router policy and the disaggregation mode on the
// other. Within 5 s of the partition healing it runs the same settings
// (it never learned them before: agreement fell from 16/16 to 10/16), and
// a settings message claiming the largest version, sent with the
// frontends' own login, pins nothing: a later change still reaches both.
func TestSettingsConvergeAfterPartition(t *testing.T) {
	l := newNATSLogin(t)
	natsURL := startConfiguredNATS(t, l, "w1")
	px := startCutProxy(t, natsURL[len("nats://"):])
	_, a, _ := startFrontend(t, l, natsURL, "--replica-id", "fe-a")
	_, b, _ := startFrontend(t, l, px.URL(), "--replica-id", "fe-b")
	settings := func(url string) (policy, mode string) {
		var r struct{ Policy string }
		var d struct{ Mode string }
		getJSON(t, url+"/admin/router", &r)
		getJSON(t, url+"/admin/disagg", &d)
		return r.Policy, d.Mode
	}
	same := func(policy, mode string) func() bool {
		return func() bool { p, m := settings(b); return p == policy && m == mode }
	}
	putJSON(t, a+"/admin/router", `{"policy":"round-robin"}`)
	eventually(t, 5*time.Second, "b follows a while connected", same("round-robin", "auto"))

	// A frontend login forging the largest version first.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fe, err := bus.Connect(ctx, natsURL, "forger", nats.UserInfo(bus.UserFrontend, bus.Password(l.secret, bus.UserFrontend)))
	if err != nil {
		t.Fatal(err)
	}
	defer fe.Close()
	fe.Publish("sy.default.fe", []byte(`{"replica":"zzzz","epoch":1,"seq":1,"settings":{"policy":"random","version":9223372036854775807,"by":"zzzz"}}`))
	fe.Flush()

	px.setCut(true)
	cutAt := time.Now()
	eventually(t, 10*time.Second, "b sees the bus down", func() bool {
		var h struct{ Bus string }
		getJSON(t, b+"/health", &h)
		return h.Bus != "up"
	})
	putJSON(t, a+"/admin/router", `{"policy":"least-loaded"}`)
	putJSON(t, a+"/admin/disagg", `{"mode":"never"}`)
	if p, m := settings(a); p != "least-loaded" || m != "never" {
		t.Fatalf("a runs %s/%s after the change, want least-loaded/never", p, m)
	}
	time.Sleep(time.Until(cutAt.Add(15 * time.Second))) // the partition itself
	px.setCut(false)
	healed := time.Now()
	eventually(t, 20*time.Second, "b runs a's settings", same("least-loaded", "never"))
	took := time.Since(healed)
	t.Logf("b converged %v after the partition healed", took.Round(10*time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("b converged %v after the partition healed, want within 5 s", took)
	}
	// Nothing is pinned: a change on b reaches a.
	putJSON(t, b+"/admin/router", `{"policy":"kv"}`)
	eventually(t, 5*time.Second, "a follows b's change", func() bool { p, _ := settings(a); return p == "kv" })
}
