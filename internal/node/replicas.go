package node

import (
	"hash/fnv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/frontend"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/replica"
	"github.com/switchyard-llm/switchyard/internal/router"
)

var (
	_ frontend.InFlight     = sharedInFlight{}
	_ frontend.StoreWatcher = sharedInFlight{}
	_ replica.Applier       = peerApplier{}
	_ frontend.Cluster      = adapters{}
)

// rotationStart derives the router's tie rotation start from the replica
// ID, so replicas break ties differently (0 for a lone frontend).
func rotationStart(id string) uint64 {
	if id == "" {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64() >> 1 // keep the counter far from wrapping
}

// sharedInFlight tells both the router and the peers (through the sharer;
// nil when sharing is off) about this replica's requests.
type sharedInFlight struct {
	r  *router.Router
	s  *replica.Sharer
	ex *expectations // nil: no event expectations
}

func (x sharedInFlight) Started(worker, id string, prefillBlocks, promptBlocks int) {
	x.r.Started(worker, id, prefillBlocks, promptBlocks)
	x.s.Started(worker, id, prefillBlocks, promptBlocks)
}

// Stores arms the expectation of the worker's KV events when the request
// makes it store blocks the index does not show there. Not Started's
// prefillBlocks: the decode worker of a remote prefill computes none, yet
// it stores (and publishes) every block the transfer brings.
func (x sharedInFlight) Stores(worker, id string, newBlocks int) {
	if x.ex != nil && newBlocks > 0 {
		x.ex.started(worker, id)
	}
}

func (x sharedInFlight) FirstToken(worker, id string) {
	x.r.FirstToken(worker, id)
	x.s.FirstToken(worker, id)
	if x.ex != nil {
		x.ex.firstToken(worker, id)
	}
}

func (x sharedInFlight) Finished(worker, id string) {
	x.r.Finished(worker, id)
	x.s.Finished(worker, id)
	if x.ex != nil {
		x.ex.finished(worker, id)
	}
}

// Release gives back a routing decision the request never followed: to
// the router, and to the peers if they were told of it.
func (x sharedInFlight) Release(worker, id string) {
	x.r.Release(worker, id)
	x.s.Finished(worker, id)
	if x.ex != nil {
		x.ex.finished(worker, id)
	}
}

// expectations remembers when each in-flight request that must store
// blocks (full prompt blocks the index does not show on its worker,
// computed there or transferred from a remote prefill) was sent to it, and
// at its first token tells the consumer to expect that worker's events
// (kvevents.Consumer.ExpectEvents).
type expectations struct {
	c  eventExpecter
	mu sync.Mutex // guards at
	at map[[2]string]time.Time
}

// eventExpecter is the part of *kvevents.Consumer expectations use.
type eventExpecter interface {
	ExpectEvents(workerID string, routed time.Time)
}

func newExpectations(c *kvevents.Consumer) *expectations {
	return &expectations{c: c, at: make(map[[2]string]time.Time)}
}

func (e *expectations) started(worker, id string) {
	e.mu.Lock()
	e.at[[2]string{worker, id}] = time.Now()
	e.mu.Unlock()
}

func (e *expectations) firstToken(worker, id string) {
	k := [2]string{worker, id}
	e.mu.Lock()
	t, ok := e.at[k]
	delete(e.at, k)
	e.mu.Unlock()
	if ok {
		e.c.ExpectEvents(worker, t)
	}
}

func (e *expectations) finished(worker, id string) {
	e.mu.Lock()
	delete(e.at, [2]string{worker, id})
	e.mu.Unlock()
}

// peerApplier applies the peers' share to this frontend. Anything naming a
// worker this frontend does not have registered is ignored, so a peer can
// never grow its state (a peer that sees a worker first catches up at its
// next full set).
type peerApplier struct{ f *Frontend }

func (a peerApplier) known(id string) bool {
	_, ok := a.f.watcher.Worker(id)
	return ok
}

func (a peerApplier) Started(worker, id string, prefillBlocks, promptBlocks int) {
	if a.known(worker) {
		a.f.router.Started(worker, id, prefillBlocks, promptBlocks)
		a.f.peerLoad.started(worker, id)
	}
}
func (a peerApplier) FirstToken(worker, id string) { a.f.router.FirstToken(worker, id) }
func (a peerApplier) Finished(worker, id string) {
	a.f.router.Finished(worker, id)
	a.f.peerLoad.finished(worker, id)
}
func (a peerApplier) Dropped(worker, id string) {
	a.f.router.Dropped(worker, id)
	a.f.peerLoad.finished(worker, id)
}

// peerLoad counts the requests the peer replicas have in flight on each
// worker, so that admission fills a worker's --max-inflight-per-worker
// slots once for the deployment, not once per replica. Safe for
// concurrent use.
type peerLoad struct {
	mu sync.Mutex                     // guards m
	m  map[string]map[string]struct{} // worker → peer request IDs (namespaced by replica)
}

func (p *peerLoad) started(worker, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]map[string]struct{}{}
	}
	ids := p.m[worker]
	if ids == nil {
		ids = map[string]struct{}{}
		p.m[worker] = ids
	}
	ids[id] = struct{}{}
}

func (p *peerLoad) finished(worker, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ids := p.m[worker]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(p.m, worker)
		}
	}
}

// PeerInFlight is how many requests the peers have open on worker.
func (p *peerLoad) PeerInFlight(worker string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m[worker])
}

func (a peerApplier) RecordApprox(worker string, hashes []uint64, at time.Time) {
	if a.known(worker) {
		a.f.router.RecordApprox(worker, hashes, at)
	}
}

func (a peerApplier) StoredResponse(id, worker string) {
	if srv := a.f.live.Load(); srv != nil {
		srv.NoteStoredResponse(id, worker)
	}
}

func (a peerApplier) Link(l replica.Link) {
	if !a.known(l.From) || !a.known(l.To) {
		return
	}
	links := a.f.gate.Links()
	if _, _, ok := links.Estimate(l.From, l.To); ok && l.Sync {
		return // a starting replica's catch-up never overrides a measurement
	}
	links.ObserveProbe(l.From, l.To, l.BytesPerSec, time.Duration(l.RTTMillis*float64(time.Millisecond)))
}

func (a peerApplier) Settings(s replica.Settings) {
	if s.Policy != "" {
		if err := a.f.router.SetPolicy(s.Policy); err != nil {
			a.f.log.Warn("a peer replica set a routing policy this one does not know; kept ours", "policy", s.Policy, "by", s.By, "err", err)
		}
	}
	if s.Disagg != "" && a.f.server != nil {
		if err := a.f.server.SetDisaggMode(s.Disagg); err != nil {
			a.f.log.Warn("a peer replica set an unknown disaggregation mode; kept ours", "mode", s.Disagg, "by", s.By, "err", err)
		}
	}
	a.f.log.Info("settings changed on a peer replica", "by", s.By, "policy", s.Policy, "disagg", s.Disagg)
}

// sharedLinks lists this frontend's measured links for a starting peer.
func (f *Frontend) sharedLinks() []replica.Link {
	var out []replica.Link
	for _, e := range f.gate.Links().Snapshot() {
		if e.Measured && e.BytesPerSec > 0 {
			out = append(out, replica.Link{From: e.From, To: e.To, BytesPerSec: e.BytesPerSec, RTTMillis: float64(e.RTT) / float64(time.Millisecond)})
		}
	}
	return out
}

// settingsChanged shares an /admin change with the peers.
func (f *Frontend) settingsChanged() {
	f.share.SetSettings(f.router.Policy(), f.server.DisaggMode())
}

// NATSStatus is the NATS connection as GET /admin/cluster reports it.
type NATSStatus struct {
	Status     string `json:"status"` // connected, reconnecting, disconnected, closed, ...
	URL        string `json:"url"`
	Servers    int    `json:"servers"` // known servers of the cluster
	Reconnects uint64 `json:"reconnects"`
	InMsgs     uint64 `json:"in_msgs"`
	OutMsgs    uint64 `json:"out_msgs"`
}

// ClusterStatus is the body of GET /admin/cluster.
type ClusterStatus struct {
	Bus      NATSStatus      `json:"bus"`
	Sharing  bool            `json:"sharing"`
	Replicas *replica.Status `json:"replicas,omitempty"`
}

// ClusterStatus implements frontend.Cluster.
func (a adapters) ClusterStatus() any {
	nc := a.f.cfg.NC
	st := nc.Stats()
	out := ClusterStatus{
		Bus: NATSStatus{Status: busState(nc.Status()), URL: nc.ConnectedUrlRedacted(), Servers: len(nc.Servers()),
			Reconnects: st.Reconnects, InMsgs: st.InMsgs, OutMsgs: st.OutMsgs},
		Sharing: a.f.share != nil,
	}
	if a.f.share != nil {
		rs := a.f.share.Status()
		out.Replicas = &rs
	}
	return out
}

func busState(s nats.Status) string {
	switch s {
	case nats.CONNECTED:
		return "connected"
	case nats.RECONNECTING:
		return "reconnecting"
	case nats.CONNECTING:
		return "connecting"
	case nats.CLOSED:
		return "closed"
	case nats.DRAINING_SUBS, nats.DRAINING_PUBS:
		return "draining"
	default:
		return "disconnected"
	}
}
