package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/bus/bustest"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
)

// trap is a TCP listener that counts the connections made to it: the
// address a hostile request asks a worker to dial.
type trap struct {
	ln    net.Listener
	conns atomic.Int64
}

func newTrap(t *testing.T) *trap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &trap{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tr.conns.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return tr
}

func post(t *testing.T, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDecodeWorkerDialsOnlyRegisteredPrefill is the field finding: a decode
// worker told remote_host/remote_port in a request, or an addr in POST
// /kvxfer/probe, dialled any address. It must dial only the kvxfer address
// of a registered prefill worker, and still answer the request (prefill
// recomputed locally).
func TestDecodeWorkerDialsOnlyRegisteredPrefill(t *testing.T) {
	ctx := context.Background()
	nc := bustest.Connect(t, bustest.Server(t, bus.EmbeddedConfig{Port: -1}).ClientURL())
	subj, _ := bus.NewSubjects("test")
	log := slog.New(slog.DiscardHandler)
	start := func(id, role string) *Worker {
		w, err := StartWorker(ctx, WorkerConfig{Sim: sim.Config{ID: id, Role: role, Speedup: 50, KVBlocks: 2000},
			HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, Logger: log, WorkerKey: "wk"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		return w
	}
	pre := start("p1", bus.RolePrefill)
	dec := start("d1", bus.RoleDecode)
	tr := newTrap(t)
	host, port, _ := net.SplitHostPort(tr.ln.Addr().String())

	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":2,"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"p1","remote_host":%q,"remote_port":%s,"lease":"00112233445566778899aabbccddeeff"}}`,
		prompt(200, 1), host, port)
	if code, b := post(t, dec.URL()+"/v1/completions", body, "Authorization", "Bearer wk"); code != 200 {
		t.Errorf("request with a foreign remote_host: status %d, want 200 (prefill recomputed locally): %s", code, b)
	}
	code, b := post(t, dec.URL()+"/kvxfer/probe", fmt.Sprintf(`{"engine_id":"p1","addr":%q,"bytes":1048576}`, tr.ln.Addr().String()), "Authorization", "Bearer wk")
	if code != http.StatusForbidden || !strings.Contains(b, "registered prefill worker") {
		t.Errorf("probe of a foreign address: status %d %s, want 403 naming the registry", code, b)
	}
	if n := tr.conns.Load(); n != 0 {
		t.Errorf("the decode worker dialled the foreign address %d times", n)
	}

	// The registered prefill worker's address is allowed, and probed for real.
	code, b = post(t, dec.URL()+"/kvxfer/probe", fmt.Sprintf(`{"engine_id":"p1","addr":%q,"bytes":1048576}`, pre.Info().KVXferAddr), "Authorization", "bearer wk")
	if code != 200 || !strings.Contains(b, `"bytes_per_sec"`) {
		t.Errorf("probe of the registered prefill worker: status %d %s", code, b)
	}
	// The registered address under another id, or a registered worker
	// that is not a prefill worker, is refused too.
	for _, engine := range []string{"p9", "d1"} {
		code, b = post(t, dec.URL()+"/kvxfer/probe", fmt.Sprintf(`{"engine_id":%q,"addr":%q,"bytes":1048576}`, engine, pre.Info().KVXferAddr), "Authorization", "Bearer wk")
		if code != http.StatusForbidden {
			t.Errorf("probe of p1's address as %s: status %d %s, want 403", engine, code, b)
		}
	}
}

// TestWorkerKeyGuardsAdminEndpoints checks /v1/*, /reset_prefix_cache and
// /kvxfer/probe need the worker key; without one the admin endpoints admit
// loopback only (and /v1 is open: TestWorkerWithoutKeyServesV1).
func TestWorkerKeyGuardsAdminEndpoints(t *testing.T) {
	ctx := context.Background()
	w, err := StartWorker(ctx, WorkerConfig{Sim: sim.Config{ID: "w1", Speedup: 50}, HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler), WorkerKey: "wk"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	tests := []struct {
		name, path, auth string
		want             int
	}{
		{"reset without key", "/reset_prefix_cache", "", 401},
		{"reset wrong key", "/reset_prefix_cache", "Bearer nope", 401},
		{"reset with key", "/reset_prefix_cache", "Bearer wk", 200},
		{"reset lower-case scheme", "/reset_prefix_cache", "bearer wk", 200},
		{"probe without key", "/kvxfer/probe", "", 401},
		{"completions without key", "/v1/completions", "", 401},
		{"completions wrong key", "/v1/completions", "Bearer nope", 401},
		{"completions with key", "/v1/completions", "Bearer wk", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"prompt":"hello","max_tokens":1}`
			if code, b := post(t, w.URL()+tc.path, body, "Authorization", tc.auth); code != tc.want {
				t.Errorf("status %d, want %d: %s", code, tc.want, b)
			}
		})
	}
	// Without a key, a remote client is refused; loopback is what the
	// test can reach, so check the rule directly.
	r, _ := http.NewRequest(http.MethodPost, "/reset_prefix_cache", nil)
	r.RemoteAddr = "10.0.0.5:4000"
	if workerAuthorized(r, "") {
		t.Errorf("no key: a remote client was admitted")
	}
	r.RemoteAddr = "127.0.0.1:4000"
	if !workerAuthorized(r, "") {
		t.Errorf("no key: a loopback client was refused")
	}
}

// TestFrontendSendsWorkerKey checks the frontend's link probes and cache
// resets carry the worker key, so a keyed deployment keeps working.
func TestFrontendSendsWorkerKey(t *testing.T) {
	ctx := context.Background()
	nc := bustest.Connect(t, bustest.Server(t, bus.EmbeddedConfig{Port: -1}).ClientURL())
	subj, _ := bus.NewSubjects("test")
	log := slog.New(slog.DiscardHandler)
	fe, err := StartFrontend(ctx, FrontendConfig{HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, Logger: log,
		Model: "qwen3-0.6b", WorkerKey: "wk", AdminKey: "adm"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fe.Close() })
	for _, s := range []struct{ id, role string }{{"p1", bus.RolePrefill}, {"d1", bus.RoleDecode}} {
		w, err := StartWorker(ctx, WorkerConfig{Sim: sim.Config{ID: s.id, Role: s.role, Speedup: 50, KVBlocks: 2000},
			HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, Logger: log, WorkerKey: "wk"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := fe.WaitWorkers(wctx, 2); err != nil {
		t.Fatal(err)
	}
	if code, b := post(t, fe.URL()+"/admin/reset-cache", "", "Authorization", "Bearer adm"); code != 200 {
		t.Errorf("reset-cache through the frontend: %d %s", code, b)
	}
	if code, b := post(t, fe.URL()+"/admin/links/probe", `{"from":"p1","to":"d1","bytes":1048576}`, "Authorization", "Bearer adm"); code != 200 {
		t.Errorf("link probe through the frontend: %d %s", code, b)
	}
	// Completions reach the keyed workers only because the frontend
	// presents the key; the client's own headers carry none.
	if code, b := post(t, fe.URL()+"/v1/completions", `{"model":"qwen3-0.6b","prompt":"hello","max_tokens":2}`); code != 200 {
		t.Errorf("completion through the frontend to keyed workers: %d %s", code, b)
	}
}

// TestWorkerWithoutKeyServesV1 checks a worker without a key keeps /v1
// open, as a single-host deployment expects.
func TestWorkerWithoutKeyServesV1(t *testing.T) {
	w, err := StartWorker(context.Background(), WorkerConfig{Sim: sim.Config{ID: "w1", Speedup: 50}, HTTPAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if code, b := post(t, w.URL()+"/v1/completions", `{"prompt":"hello","max_tokens":1}`); code != 200 {
		t.Errorf("completion on a worker without a key: %d %s", code, b)
	}
}

// TestWorkerNetworksRefuseInHealth checks --worker-networks end to end in
// process: a worker registered outside the networks is never routed to and
// /health lists it as refused.
func TestWorkerNetworksRefuseInHealth(t *testing.T) {
	ctx := context.Background()
	nc := bustest.Connect(t, bustest.Server(t, bus.EmbeddedConfig{Port: -1}).ClientURL())
	subj, _ := bus.NewSubjects("test")
	log := slog.New(slog.DiscardHandler)
	fe, err := StartFrontend(ctx, FrontendConfig{HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, Logger: log,
		Model: "qwen3-0.6b", WorkerNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fe.Close() })
	w, err := StartWorker(ctx, WorkerConfig{Sim: sim.Config{ID: "w1", Speedup: 50}, HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for len(fe.Server().Health().Refused) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("w1 was not refused within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h := fe.Server().Health()
	if r := h.Refused[0]; r.ID != "w1" || !strings.Contains(r.Reason, "outside --worker-networks") {
		t.Errorf("refused %+v", h.Refused)
	}
	if len(h.Workers) != 0 || h.Status != "unavailable" {
		t.Errorf("health %s with workers %+v, want unavailable and none routable", h.Status, h.Workers)
	}
	if code, _ := post(t, fe.URL()+"/v1/completions", `{"model":"qwen3-0.6b","prompt":"hi","max_tokens":1}`); code != http.StatusServiceUnavailable {
		t.Errorf("completion status %d, want 503", code)
	}
}
