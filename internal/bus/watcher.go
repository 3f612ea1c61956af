package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/switchyard-llm/switchyard/internal/prom"
)

// ChangeKind says what happened to a worker in the registry view.
type ChangeKind uint8

const (
	// WorkerAdded: the worker became routable.
	WorkerAdded ChangeKind = iota + 1
	// WorkerUpdated: a routable worker's entry changed.
	WorkerUpdated
	// WorkerRemoved: the worker left (deleted, expired or now refused); drop
	// it from the index and the router.
	WorkerRemoved
	// WorkerRefused: the worker registered but is incompatible; Reason says why.
	WorkerRefused
)

func (k ChangeKind) String() string {
	switch k {
	case WorkerAdded:
		return "added"
	case WorkerUpdated:
		return "updated"
	case WorkerRemoved:
		return "removed"
	case WorkerRefused:
		return "refused"
	}
	return "unknown"
}

// Change is one update to the registry view.
type Change struct {
	Kind   ChangeKind
	Worker WorkerInfo
	Reason string // why a worker was removed or refused
	// Deregistered: a WorkerRemoved because the worker deleted its own
	// entry (a clean shutdown, which drains its requests), not because the
	// entry expired or was purged.
	Deregistered bool
}

// RefusedWorker is a registered worker kept out of routing.
type RefusedWorker struct {
	Worker WorkerInfo // as decoded; ID is the registry key if it did not decode
	Reason string
	Since  time.Time
}

// WatchConfig configures a Watcher.
type WatchConfig struct {
	// Model and BlockSize are what the frontend serves; workers that differ
	// are refused. Empty/zero accepts any.
	Model     string
	BlockSize int
	// BlockSizes overrides BlockSize for the workers of a model, by the
	// worker's Model: a fleet's models may use different block sizes.
	BlockSizes map[string]int
	// OnChange, if set, is called for every change, in order, from the
	// watcher's goroutine and outside its lock. It must not block for long.
	OnChange func(Change)
	Logger   *slog.Logger
	// Networks, when set, are the only networks a worker's HTTP URL and
	// kvxfer address may be in (see CheckNetworks); others are refused.
	Networks []netip.Prefix
	// Alive, if set, is asked before a worker whose entry went unrefreshed
	// for the TTL (or was purged) leaves the view: nil keeps it for another
	// TTL. A worker whose own link to the bus froze still serves its
	// requests; only one that fails Alive too is gone. It is called from its
	// own goroutine, at most once at a time per worker.
	Alive func(ctx context.Context, w WorkerInfo) error
}

// Bus states a Watcher reports (BusState). Each one but BusUp stops expiry:
// the registry cannot be heard, so its silence says nothing about workers.
const (
	BusUp = "up"
	// BusDisconnected: the NATS connection is down.
	BusDisconnected = "down"
	// BusStalled: connected, but the server does not answer a round trip
	// (a PING/PONG flush) within BusProbeTimeout: frozen or overloaded.
	BusStalled = "stalled"
	// BusNoJetStream: core NATS answers but the registry's JetStream
	// stream does not (JetStream disabled, or the stream deleted and not
	// yet recreated).
	BusNoJetStream = "jetstream unavailable"
)

// BusProbeEvery and BusProbeTimeout pace the watcher's round-trip probe of
// the bus: a flush, then the registry stream's info. A server that stops
// answering shows as stalled within BusProbeEvery+BusProbeTimeout (1.5 s),
// well inside the 3 s /health promises and before any entry (TTL 6 s) can
// expire for want of a refresh the server never passed on.
var (
	BusProbeEvery   = 500 * time.Millisecond
	BusProbeTimeout = time.Second
)

// Watcher is a live view of the registry. Routable workers are those with a
// compatible entry refreshed within the TTL. It is safe for concurrent use.
//
// Expiry does not depend on the server: besides delete, purge and expiry
// markers, a sweep drops any entry not refreshed within the TTL, measured
// from when this watcher received it. Entries present at start are dated by
// their server timestamp (clamped to the TTL), so a worker that died before
// the watcher started still leaves within the TTL of its last refresh.
//
// It fails static: while the NATS connection or the watch is down, the
// sweep stops and the last known workers stay routable (the frontend's
// outlier ejection drops those that stop answering HTTP). When the watch
// is back (the bucket recreated if the server lost it), every entry gets a
// fresh TTL to be refreshed in, so workers that re-register in time never
// leave. BusDown reports the state.
type Watcher struct {
	r    *Registry
	cfg  WatchConfig
	log  *slog.Logger
	kw   jetstream.KeyWatcher
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu        sync.Mutex // guards entries, down, downSince and downCause
	entries   map[string]*watchEntry
	down      string // "" when up, else a Bus* state: entries do not expire
	downSince time.Time
	downCause string

	routable    prometheus.GaugeFunc
	refusedG    prometheus.GaugeFunc
	refusals    prometheus.Counter
	expirySwept prometheus.Counter
	keptAlive   prometheus.Counter

	// lastRoundTrip is when the probe last had an answer (unix ns). The
	// probe itself may block inside the NATS client on a frozen server, so
	// staleness of this time, not only a failed probe, means stalled.
	lastRoundTrip atomic.Int64
}

type watchEntry struct {
	raw      []byte
	info     WorkerInfo
	refused  string // non-empty: the refusal reason
	since    time.Time
	lastSeen time.Time
	checking bool // an Alive check is under way
}

// aliveResult is the answer of an Alive check started by the sweep.
type aliveResult struct {
	key   string
	entry *watchEntry
	err   error
}

// probeResult is one round-trip probe of the bus: state is BusUp,
// BusStalled or BusNoJetStream.
type probeResult struct {
	state string
	cause string
}

// WatchWorkers starts watching the registry. It returns once the entries
// present now are loaded, so Workers is complete on return. The watcher
// stops when ctx ends or Close is called.
func (r *Registry) WatchWorkers(ctx context.Context, cfg WatchConfig) (*Watcher, error) {
	kw, err := r.bucket().WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: watch registry: %w", err)
	}
	w := &Watcher{
		r: r, cfg: cfg, log: cfg.Logger, kw: kw,
		stop: make(chan struct{}), done: make(chan struct{}),
		entries: make(map[string]*watchEntry),
		refusals: prom.Counter("switchyard_registry_refusals_total",
			"Workers refused because their model or block size differs from the frontend's (or their entry is invalid)."),
		expirySwept: prom.Counter("switchyard_registry_expired_total",
			"Workers dropped because their registry entry was not refreshed within the TTL."),
		keptAlive: prom.Counter("switchyard_registry_kept_alive_total",
			"Registry entries left unrefreshed for the TTL whose worker still answered HTTP, so it stayed routable."),
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.lastRoundTrip.Store(time.Now().UnixNano())
	w.routable = prom.GaugeFunc("switchyard_registry_workers",
		"Routable workers in the registry view.", func() float64 { return float64(len(w.Workers())) })
	w.refusedG = prom.GaugeFunc("switchyard_registry_refused_workers",
		"Registered workers currently refused.", func() float64 { return float64(len(w.Refused())) })

	// Initial values end with a nil entry.
	var changes []Change
	for initial := true; initial; {
		select {
		case e, ok := <-kw.Updates():
			if !ok {
				kw.Stop()
				return nil, fmt.Errorf("bus: watch registry: watcher closed during initial load")
			}
			if e == nil {
				initial = false
				break
			}
			seen := time.Now()
			if c := e.Created(); c.Before(seen) {
				seen = maxTime(c, seen.Add(-r.ttl))
			}
			changes = w.apply(e, seen, changes)
		case <-ctx.Done():
			kw.Stop()
			return nil, fmt.Errorf("bus: watch registry: %w", ctx.Err())
		}
	}
	w.emit(changes)
	go w.loop(ctx)
	return w, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stopped reports whether Close has been called.
func (w *Watcher) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *Watcher) loop(ctx context.Context) {
	defer close(w.done)
	kw := w.kw // owned by this goroutine from here on
	defer func() { _ = kw.Stop() }()
	sweep := time.NewTicker(max(w.r.ttl/10, 20*time.Millisecond))
	defer sweep.Stop()
	status := w.r.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED)
	defer w.r.nc.RemoveStatusListener(status)
	updates := kw.Updates()
	var retry <-chan time.Time // set while the watch must be re-established
	var changes []Change
	// The probe and the Alive checks run beside the loop, which must not
	// block on a server that does not answer; they end with ctx.
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	probes := make(chan probeResult)
	go w.probeLoop(pctx, probes)
	alive := make(chan aliveResult)
	for {
		changes = changes[:0]
		select {
		case <-ctx.Done():
			return
		case <-w.stop:
			return
		case st := <-status:
			if st != nats.CONNECTED {
				w.setDown(BusDisconnected, "NATS connection lost; reconnecting")
				continue
			}
			// After a reconnect the server may be a new one that lost the
			// bucket, and the old watch may never deliver again: rebuild it.
			w.setDown(BusDisconnected, "NATS reconnected; re-establishing the registry watch")
			updates, retry = nil, time.After(0)
		case p := <-probes:
			if p.state != BusUp {
				w.setDown(p.state, p.cause)
				if p.state == BusNoJetStream && retry == nil {
					// The stream may be gone: rewatch recreates it.
					updates, retry = nil, time.After(0)
				}
				continue
			}
			if state, _, _ := w.BusState(); (state == BusStalled || state == BusNoJetStream) && retry == nil {
				// The server answers again. The old watch may have missed
				// updates, or died with its stream: rebuild it; setUp
				// follows once it is back.
				updates, retry = nil, time.After(0)
			}
		case a := <-alive:
			changes = w.aliveAnswer(a, time.Now(), changes)
		case e, ok := <-updates:
			if !ok {
				if ctx.Err() != nil || w.stopped() {
					return // our own shutdown closed it: nothing to report
				}
				w.setDown(BusDisconnected, "registry watch ended")
				w.log.Error("registry watch ended; re-establishing it", "retry_in", retryEvery)
				updates, retry = nil, time.After(retryEvery)
				continue
			}
			if e != nil {
				changes = w.apply(e, time.Now(), changes)
			}
		case <-retry:
			nkw, err := w.rewatch(ctx)
			if err != nil {
				state := BusDisconnected
				if w.r.nc.IsConnected() {
					// Core NATS answers; the registry's stream does not.
					state = BusNoJetStream
				}
				w.setDown(state, "re-establishing the registry watch: "+err.Error())
				retry = time.After(retryEvery)
				continue
			}
			_ = kw.Stop()
			kw, updates, retry = nkw, nkw.Updates(), nil
			w.setUp(time.Now())
		case now := <-sweep.C:
			changes = w.sweep(pctx, now, changes, alive)
		}
		w.emit(changes)
	}
}

// rewatch recreates the bucket if it is gone and watches it again.
func (w *Watcher) rewatch(ctx context.Context) (jetstream.KeyWatcher, error) {
	if !w.r.nc.IsConnected() {
		return nil, errors.New("bus: NATS is not connected")
	}
	// The watch lives as long as ctx, so only the bucket call is bounded.
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	kv, err := w.r.ensure(ectx)
	cancel()
	if err != nil {
		return nil, err
	}
	return kv.WatchAll(ctx)
}

// probeLoop checks the bus every BusProbeEvery with a round trip: a flush
// (PING/PONG) for core NATS, then the registry stream's info for JetStream.
// A frozen server keeps its TCP connection open, so the client's own
// PINGs would take 15 s or more to notice; this takes at most 1.5 s. It
// skips while disconnected (the status listener reports that) and sends
// each result to out.
func (w *Watcher) probeLoop(ctx context.Context, out chan<- probeResult) {
	t := time.NewTicker(BusProbeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !w.r.nc.IsConnected() {
			continue
		}
		p := probeResult{state: BusUp}
		err := w.r.nc.FlushTimeout(BusProbeTimeout)
		if err == nil {
			w.lastRoundTrip.Store(time.Now().UnixNano())
		}
		if err != nil {
			p = probeResult{state: BusStalled, cause: fmt.Sprintf("NATS server answers no round trip within %v: %v", BusProbeTimeout, err)}
		} else {
			sctx, cancel := context.WithTimeout(ctx, BusProbeTimeout)
			_, err := w.r.bucket().Status(sctx)
			cancel()
			if err != nil {
				p = probeResult{state: BusNoJetStream, cause: "registry stream: " + err.Error()}
			}
		}
		if !w.r.nc.IsConnected() {
			continue // the failure was the disconnect, reported apart
		}
		select {
		case out <- p:
		case <-ctx.Done():
			return
		}
	}
}

// setDown stops expiry: the registry cannot be heard, so silence says
// nothing about the workers. state is one of the Bus* states.
func (w *Watcher) setDown(state, cause string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down == "" {
		w.downSince = time.Now()
		w.log.Warn("registry unreachable: routing to the last known workers until it is back", "bus", state, "cause", cause)
	} else if w.down != state {
		w.log.Warn("registry still unreachable", "bus", state, "cause", cause)
	}
	w.down, w.downCause = state, cause
}

// setUp resumes expiry, giving every entry a full TTL from now to be
// refreshed in.
func (w *Watcher) setUp(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down == "" {
		return
	}
	for _, e := range w.entries {
		e.lastSeen = maxTime(e.lastSeen, now)
	}
	w.log.Info("registry watch re-established", "was", w.down, "down_for", now.Sub(w.downSince).Round(time.Millisecond))
	w.down, w.downCause = "", ""
}

// BusDown reports whether the registry is unreachable (the NATS connection
// or the watch is down, the server stalled or JetStream unavailable),
// since when and why. While it is, the routable workers are the last known
// ones.
func (w *Watcher) BusDown() (down bool, since time.Time, cause string) {
	state, since, cause := w.BusState()
	return state != BusUp, since, cause
}

// BusState is BusDown with the state named: BusUp, BusDisconnected,
// BusStalled or BusNoJetStream.
func (w *Watcher) BusState() (state string, since time.Time, cause string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down == "" {
		if at, stalled := w.roundTripOverdue(time.Now()); stalled {
			return BusStalled, at, "no round trip answered since " + at.Format(time.RFC3339Nano)
		}
		return BusUp, time.Time{}, ""
	}
	return w.down, w.downSince, w.downCause
}

// roundTripOverdue reports whether the connection is up but no probe has
// had an answer for BusProbeEvery+BusProbeTimeout, and since when.
func (w *Watcher) roundTripOverdue(now time.Time) (since time.Time, overdue bool) {
	last := time.Unix(0, w.lastRoundTrip.Load())
	if now.Sub(last) <= BusProbeEvery+BusProbeTimeout || !w.r.nc.IsConnected() {
		return time.Time{}, false
	}
	return last, true
}

// apply folds one KV entry into the view and appends the resulting changes.
func (w *Watcher) apply(e jetstream.KeyValueEntry, seen time.Time, changes []Change) []Change {
	key := e.Key()
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.entries[key]
	if e.Operation() != jetstream.KeyValuePut {
		if old == nil {
			return changes
		}
		if e.Operation() == jetstream.KeyValuePurge && old.refused == "" && w.cfg.Alive != nil {
			// Most likely the server's expiry marker: the entry went
			// unrefreshed, which the sweep judges with an Alive check.
			old.lastSeen = time.Time{}
			return changes
		}
		delete(w.entries, key)
		if old.refused != "" {
			return changes
		}
		reason := "deregistered (entry deleted)"
		if e.Operation() == jetstream.KeyValuePurge {
			reason = "entry purged (expired or removed by an operator)"
		}
		if e.Operation() == jetstream.KeyValueDelete {
			// A worker that deregisters is shutting down in order.
			w.log.Info("worker left the registry", "worker", key, "reason", reason)
		} else {
			w.log.Warn("worker left the registry", "worker", key, "reason", reason)
		}
		return append(changes, Change{Kind: WorkerRemoved, Worker: old.info, Reason: reason, Deregistered: e.Operation() == jetstream.KeyValueDelete})
	}
	if old != nil && bytes.Equal(old.raw, e.Value()) {
		old.lastSeen = seen // a heartbeat
		return changes
	}
	ne := &watchEntry{raw: slices.Clone(e.Value()), lastSeen: seen, since: seen}
	if err := json.Unmarshal(ne.raw, &ne.info); err != nil {
		ne.info = WorkerInfo{ID: key}
		ne.refused = fmt.Sprintf("bus: worker %s: registry entry does not decode: %v", key, err)
	} else if ne.info.ID != key {
		ne.refused = fmt.Sprintf("bus: registry key %s holds worker id %q", key, ne.info.ID)
	} else if err := CheckCompatible(ne.info, w.cfg.Model, w.blockSize(ne.info.Model)); err != nil {
		ne.refused = err.Error()
	} else if err := CheckNetworks(ne.info, w.cfg.Networks); err != nil {
		ne.refused = err.Error()
	}
	w.entries[key] = ne
	switch {
	case ne.refused != "":
		if old != nil && old.refused == ne.refused {
			ne.since = old.since
			return changes
		}
		w.refusals.Inc()
		w.log.Error("worker refused", "worker", key, "reason", ne.refused)
		if old != nil && old.refused == "" {
			changes = append(changes, Change{Kind: WorkerRemoved, Worker: old.info, Reason: ne.refused})
		}
		return append(changes, Change{Kind: WorkerRefused, Worker: ne.info, Reason: ne.refused})
	case old == nil || old.refused != "":
		w.log.Info("worker registered", "worker", key, "role", ne.info.Role, "url", ne.info.HTTPURL)
		return append(changes, Change{Kind: WorkerAdded, Worker: ne.info})
	default:
		return append(changes, Change{Kind: WorkerUpdated, Worker: ne.info})
	}
}

// blockSize is the block size the workers of model must use.
func (w *Watcher) blockSize(model string) int {
	if bs, ok := w.cfg.BlockSizes[model]; ok {
		return bs
	}
	return w.cfg.BlockSize
}

// sweep drops entries not refreshed within the TTL. With an Alive check,
// a stale routable entry is first checked (answer on alive) and dropped
// only if the check fails.
func (w *Watcher) sweep(ctx context.Context, now time.Time, changes []Change, alive chan<- aliveResult) []Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down != "" {
		return changes
	}
	if _, stalled := w.roundTripOverdue(now); stalled {
		return changes // the probe is stuck on a silent server: fail static
	}
	for key, e := range w.entries {
		if now.Sub(e.lastSeen) <= w.r.ttl {
			continue
		}
		if w.cfg.Alive != nil && e.refused == "" {
			if !e.checking {
				e.checking = true
				go func(info WorkerInfo) {
					err := w.cfg.Alive(ctx, info)
					select {
					case alive <- aliveResult{key: key, entry: e, err: err}:
					case <-ctx.Done():
					}
				}(e.info)
			}
			continue
		}
		delete(w.entries, key)
		w.expirySwept.Inc()
		if e.refused != "" {
			continue
		}
		reason := fmt.Sprintf("no registry refresh for %v (ttl %v)", now.Sub(e.lastSeen).Round(time.Millisecond), w.r.ttl)
		w.log.Warn("worker expired", "worker", key, "reason", reason)
		changes = append(changes, Change{Kind: WorkerRemoved, Worker: e.info, Reason: reason})
	}
	return changes
}

// aliveAnswer applies an Alive check's answer: a worker that answers gets
// another TTL; one that does not leaves, unless its entry was refreshed or
// replaced meanwhile.
func (w *Watcher) aliveAnswer(a aliveResult, now time.Time, changes []Change) []Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	a.entry.checking = false
	if w.entries[a.key] != a.entry || now.Sub(a.entry.lastSeen) <= w.r.ttl {
		return changes
	}
	if a.err == nil {
		a.entry.lastSeen = now
		w.keptAlive.Inc()
		w.log.Warn("worker's registry entry not refreshed, but it answers HTTP: keeping it routable", "worker", a.key, "ttl", w.r.ttl)
		return changes
	}
	delete(w.entries, a.key)
	w.expirySwept.Inc()
	reason := fmt.Sprintf("no registry refresh for the ttl (%v), and its health check fails: %v", w.r.ttl, a.err)
	w.log.Warn("worker expired", "worker", a.key, "reason", reason)
	return append(changes, Change{Kind: WorkerRemoved, Worker: a.entry.info, Reason: reason})
}

func (w *Watcher) emit(changes []Change) {
	if w.cfg.OnChange == nil {
		return
	}
	for _, c := range changes {
		w.cfg.OnChange(c)
	}
}

// Workers returns the routable workers, sorted by ID.
func (w *Watcher) Workers() []WorkerInfo {
	w.mu.Lock()
	out := make([]WorkerInfo, 0, len(w.entries))
	for _, e := range w.entries {
		if e.refused == "" {
			out = append(out, e.info)
		}
	}
	w.mu.Unlock()
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Worker returns one routable worker.
func (w *Watcher) Worker(id string) (WorkerInfo, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.entries[id]
	if !ok || e.refused != "" {
		return WorkerInfo{}, false
	}
	return e.info, true
}

// Refused returns the registered workers kept out of routing, sorted by ID.
func (w *Watcher) Refused() []RefusedWorker {
	w.mu.Lock()
	var out []RefusedWorker
	for _, e := range w.entries {
		if e.refused != "" {
			out = append(out, RefusedWorker{Worker: e.info, Reason: e.refused, Since: e.since})
		}
	}
	w.mu.Unlock()
	slices.SortFunc(out, func(a, b RefusedWorker) int { return strings.Compare(a.Worker.ID, b.Worker.ID) })
	return out
}

// Register adds the watcher's metrics to reg.
func (w *Watcher) Register(reg prometheus.Registerer) error {
	return prom.Register(reg, "bus", w.routable, w.refusedG, w.refusals, w.expirySwept, w.keptAlive)
}

// Close stops the watcher and waits for its goroutine.
func (w *Watcher) Close() error {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return nil
}
