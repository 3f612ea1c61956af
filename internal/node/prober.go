package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvxfer"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Prober serves POST /kvxfer/probe: it measures the link from a registered
// prefill worker's KV transfer server to this host, for a decode worker or
// for a bridge in front of a real decode engine. The frontend asks; only
// addresses the registry gives a prefill worker are ever dialled.
type Prober struct {
	ID         string      // the worker id, for messages
	Key        string      // worker key: required bearer token and kvxfer probe key; "" admits loopback only
	ClientTLS  *tls.Config // nil: plain TCP
	BlockBytes int         // sent when dialling; 0 is fine for probes
	peers      atomic.Pointer[bus.Registry]
}

// SetRegistry gives the prober the registry it vets addresses against;
// until then it refuses every probe.
func (p *Prober) SetRegistry(r *bus.Registry) { p.peers.Store(r) }

// Handler is the keyed POST /kvxfer/probe handler.
func (p *Prober) Handler() http.HandlerFunc { return keyed(p.ID, p.Key, p.serve) }

// Allow admits a KV transfer address only when it is the registered
// kvxfer address of prefill worker engineID, as the registry says now: a
// request's remote_host/remote_port, or a probe's addr, must not make this
// worker dial anything else.
func (p *Prober) Allow(engineID, addr string) error {
	reg := p.peers.Load()
	if reg == nil {
		return fmt.Errorf("node: worker %s is not registered on the bus, so it knows no prefill worker it may pull from; refusing to dial %s", p.ID, addr)
	}
	if engineID == "" {
		return fmt.Errorf("node: no remote_engine_id (or probe engine_id) names the prefill worker at %s; refusing to dial it", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w, ok, err := reg.Get(ctx, engineID)
	switch {
	case err != nil:
		return fmt.Errorf("node: cannot check %s against the registry, so refusing to dial it: %w", addr, err)
	case !ok:
		return fmt.Errorf("node: %q is not a registered worker; refusing to dial %s", engineID, addr)
	case w.Role != bus.RolePrefill || w.KVXferAddr != addr:
		return fmt.Errorf("node: %s is not the kvxfer address of registered prefill worker %q; refusing to dial it", addr, engineID)
	}
	return nil
}

// serve runs a kvxfer probe against another worker's transfer server: the
// bytes travel the real path a KV pull to this host would take.
func (p *Prober) serve(rw http.ResponseWriter, r *http.Request) {
	var req ProbeRequest
	if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 4096)).Decode(&req); err != nil || req.Addr == "" || req.Bytes <= 0 || req.EngineID == "" {
		http.Error(rw, `{"error":{"message":"want {\"engine_id\": prefill worker id, \"addr\": its kvxfer host:port, \"bytes\": n > 0}","type":"invalid_request_error","code":400}}`, http.StatusBadRequest)
		return
	}
	if err := p.Allow(req.EngineID, req.Addr); err != nil {
		openai.WriteError(rw, http.StatusForbidden, openai.TypeInvalidRequest, "addr", err.Error())
		return
	}
	c, err := kvxfer.Dial(r.Context(), req.Addr, kvxfer.ClientConfig{TLS: p.ClientTLS, BlockBytes: p.BlockBytes, ProbeKey: p.Key})
	if err == nil {
		defer c.Close()
		start := time.Now()
		var bps float64
		var rtt time.Duration
		bps, rtt, err = c.Probe(r.Context(), req.Bytes)
		if err == nil {
			rw.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(rw).Encode(ProbeResponse{Bytes: req.Bytes, Seconds: time.Since(start).Seconds(), BytesPerSec: bps, RTTMillis: float64(rtt) / 1e6})
			return
		}
	}
	msg, _ := json.Marshal(err.Error())
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(http.StatusBadGateway)
	fmt.Fprintf(rw, `{"error":{"message":%s,"type":"server_error","code":502}}`, msg)
}
