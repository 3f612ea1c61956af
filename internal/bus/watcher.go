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
}

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
	down      bool // the connection or the watch is down: entries do not expire
	downSince time.Time
	downCause string

	routable    prometheus.GaugeFunc
	refusedG    prometheus.GaugeFunc
	refusals    prometheus.Counter
	expirySwept prometheus.Counter
}

type watchEntry struct {
	raw      []byte
	info     WorkerInfo
	refused  string // non-empty: the refusal reason
	since    time.Time
	lastSeen time.Time
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
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
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
	for {
		changes = changes[:0]
		select {
		case <-ctx.Done():
			return
		case <-w.stop:
			return
		case st := <-status:
			if st != nats.CONNECTED {
				w.setDown("NATS connection lost; reconnecting")
				continue
			}
			// After a reconnect the server may be a new one that lost the
			// bucket, and the old watch may never deliver again: rebuild it.
			w.setDown("NATS reconnected; re-establishing the registry watch")
			updates, retry = nil, time.After(0)
		case e, ok := <-updates:
			if !ok {
				if ctx.Err() != nil || w.stopped() {
					return // our own shutdown closed it: nothing to report
				}
				w.setDown("registry watch ended")
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
				w.setDown("re-establishing the registry watch: " + err.Error())
				retry = time.After(retryEvery)
				continue
			}
			_ = kw.Stop()
			kw, updates, retry = nkw, nkw.Updates(), nil
			w.setUp(time.Now())
		case now := <-sweep.C:
			changes = w.sweep(now, changes)
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

// setDown stops expiry: the registry cannot be heard, so silence says
// nothing about the workers.
func (w *Watcher) setDown(cause string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.down {
		w.down, w.downSince = true, time.Now()
		w.log.Warn("registry unreachable: routing to the last known workers until it is back", "cause", cause)
	}
	w.downCause = cause
}

// setUp resumes expiry, giving every entry a full TTL from now to be
// refreshed in.
func (w *Watcher) setUp(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.down {
		return
	}
	for _, e := range w.entries {
		e.lastSeen = maxTime(e.lastSeen, now)
	}
	w.log.Info("registry watch re-established", "down_for", now.Sub(w.downSince).Round(time.Millisecond))
	w.down, w.downCause = false, ""
}

// BusDown reports whether the registry is unreachable (the NATS connection
// or the watch is down), since when and why. While it is, the routable
// workers are the last known ones.
func (w *Watcher) BusDown() (down bool, since time.Time, cause string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.down, w.downSince, w.downCause
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

// sweep drops entries not refreshed within the TTL.
func (w *Watcher) sweep(now time.Time, changes []Change) []Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down {
		return changes
	}
	for key, e := range w.entries {
		if now.Sub(e.lastSeen) <= w.r.ttl {
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
	return prom.Register(reg, "bus", w.routable, w.refusedG, w.refusals, w.expirySwept)
}

// Close stops the watcher and waits for its goroutine.
func (w *Watcher) Close() error {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return nil
}
