package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultTTL is how long a registry entry lives without a refresh. Workers
// refresh every TTL/3, so two refreshes can be lost before a live worker
// expires, and a dead one leaves routing within 6 s (the issue asks ≤ 10 s).
const DefaultTTL = 6 * time.Second

// retryEvery paces retries of a failed registry refresh or watch: short
// enough that a NATS server back from a restart sees every worker again
// well within a TTL, long enough not to spin while it is down.
const retryEvery = 250 * time.Millisecond

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	NC       *nats.Conn
	Subjects Subjects
	// TTL of an entry without refresh; 0 means DefaultTTL. It only applies
	// when this call creates the bucket: an existing bucket keeps its TTL,
	// and Registry.TTL reports the one in force.
	TTL time.Duration
	// Replicas of the bucket in a JetStream cluster; 0 means 1.
	Replicas int
	Logger   *slog.Logger
	// ViaFrontend makes a worker's registry: it never touches JetStream,
	// and registers, deregisters and reads entries through a frontend's
	// Registrar, waiting up to BucketWait for one to answer. Workers that
	// log in with their own credentials set it: WorkerPermissions grant no
	// JetStream API (see registrar.go for why).
	ViaFrontend bool
	// WorkerID is the worker a ViaFrontend registry acts for: its reads go
	// on that worker's registrar subject. Join sets it from the entry.
	WorkerID string
}

// BucketWait is how long a ViaFrontend registry waits for a frontend to
// answer at start.
var BucketWait = 30 * time.Second

// Registry is the worker registry: a JetStream key-value bucket, one key per
// worker ID, whose entries expire TTL after their last refresh. It is safe
// for concurrent use.
//
// The bucket uses memory storage, so a NATS server restart loses it. A
// Watcher recreates it whenever it re-establishes its watch (on every
// reconnect); a Registration puts its entry again on reconnect and every
// 250 ms while that fails, recreating the bucket itself (through the
// frontend, for a ViaFrontend registry).
type Registry struct {
	nc          *nats.Conn
	subj        Subjects
	js          jetstream.JetStream
	kvCfg       jetstream.KeyValueConfig
	viaFrontend bool
	self        string // the ViaFrontend worker
	ttl         time.Duration
	log         *slog.Logger

	mu sync.Mutex // guards kv
	kv jetstream.KeyValue
}

// OpenRegistry opens the namespace's registry bucket, creating it if needed.
func OpenRegistry(ctx context.Context, cfg RegistryConfig) (*Registry, error) {
	if cfg.NC == nil {
		return nil, errors.New("bus: registry: no NATS connection")
	}
	if err := ValidateName("namespace", cfg.Subjects.ns()); err != nil {
		return nil, err
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < 100*time.Millisecond {
		return nil, fmt.Errorf("bus: registry ttl %v is below 100ms", ttl)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.ViaFrontend {
		if err := ValidateName("worker id", cfg.WorkerID); err != nil {
			return nil, fmt.Errorf("bus: registry via the frontend: %w", err)
		}
		r := &Registry{nc: cfg.NC, subj: cfg.Subjects, viaFrontend: true, self: cfg.WorkerID, ttl: ttl, log: log}
		if err := r.openViaFrontend(ctx); err != nil {
			return nil, err
		}
		return r, nil
	}
	js, err := jetstream.New(cfg.NC)
	if err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	bucket := cfg.Subjects.WorkersBucket()
	kvCfg := jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "switchyard worker registry",
		History:     1,
		TTL:         ttl,
		Replicas:    max(cfg.Replicas, 1),
		Storage:     jetstream.MemoryStorage,
		// Markers make the server tell watchers when a key expires. The
		// watcher does not rely on them (see Watcher), but they make
		// removal prompt instead of waiting for the staleness sweep.
		LimitMarkerTTL: ttl,
	}
	r := &Registry{nc: cfg.NC, subj: cfg.Subjects, js: js, kvCfg: kvCfg, ttl: ttl, log: log}
	kv, err := r.ensure(ctx)
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: registry bucket %s status: %w", bucket, err)
	}
	if st.TTL() > 0 {
		r.ttl = st.TTL()
	}
	return r, nil
}

// ensure opens the bucket, creating it if it does not exist (again: a NATS
// restart loses a memory-storage bucket). Creating a bucket that exists
// with the same settings is a no-op on the server, so every process may
// call it at once.
func (r *Registry) ensure(ctx context.Context) (jetstream.KeyValue, error) {
	cfg := r.kvCfg
	kv, err := r.js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		cfg.LimitMarkerTTL = 0
		kv, err = r.js.CreateKeyValue(ctx, cfg)
	}
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Another TTL (or server version) made it first; use it as it is.
		kv, err = r.js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: open registry bucket %s: %w", cfg.Bucket, err)
	}
	r.mu.Lock()
	r.kv = kv
	r.mu.Unlock()
	return kv, nil
}

func (r *Registry) bucket() jetstream.KeyValue {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kv
}

// bucketGone reports whether err says the registry's stream is missing,
// as it is after a restart of a NATS server that held it in memory.
func bucketGone(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, nats.ErrNoResponders)
}

// put writes key, recreating the bucket once if it is gone.
func (r *Registry) put(ctx context.Context, key string, val []byte) error {
	if r.viaFrontend {
		_, err := r.relay(ctx, key, registrarRequest{Op: opPut, Entry: val})
		return err
	}
	_, err := r.bucket().Put(ctx, key, val)
	if err == nil || !bucketGone(err) {
		return err
	}
	kv, eerr := r.ensure(ctx)
	if eerr != nil {
		return fmt.Errorf("%w (recreating the bucket: %w)", err, eerr)
	}
	r.log.Info("registry bucket recreated (the NATS server lost it, e.g. in a restart)", "bucket", r.kvCfg.Bucket)
	_, err = kv.Put(ctx, key, val)
	return err
}

// TTL is the entry lifetime in force for the bucket.
func (r *Registry) TTL() time.Duration { return r.ttl }

// Get reads worker id's entry; ok is false when there is none (never
// registered, deleted or expired). It is one request to the server, so its
// answer is current, unlike a watcher's view.
func (r *Registry) Get(ctx context.Context, id string) (info WorkerInfo, ok bool, err error) {
	if err := ValidateName("worker id", id); err != nil {
		return info, false, err
	}
	if r.viaFrontend {
		rep, err := r.relay(ctx, r.self, registrarRequest{Op: opGet, ID: id})
		if err != nil || !rep.Found || rep.Entry == nil {
			return info, false, err
		}
		return *rep.Entry, true, nil
	}
	e, err := r.bucket().Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return info, false, nil
	}
	if err != nil {
		return info, false, fmt.Errorf("bus: registry get %s: %w", id, err)
	}
	if e.Operation() != jetstream.KeyValuePut {
		return info, false, nil
	}
	if err := json.Unmarshal(e.Value(), &info); err != nil || info.ID != id {
		return WorkerInfo{}, false, nil // a refused entry is no entry
	}
	// An entry older than the TTL belongs to a worker that stopped
	// refreshing; the server's expiry may lag.
	if time.Since(e.Created()) > r.ttl {
		return WorkerInfo{}, false, nil
	}
	return info, true, nil
}

// Registration keeps one worker's entry alive. Close deletes it.
type Registration struct {
	r    *Registry
	key  string
	val  []byte
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu        sync.Mutex // guards keepEntry, closeErr and val after Register
	keepEntry bool       // set by abandon: stop refreshing but leave the key to expire
	closeErr  error
}

// Update replaces the registered entry with info (same ID) and puts it at
// once, so watchers see the change without waiting for a refresh: a
// worker marks itself draining this way.
func (g *Registration) Update(ctx context.Context, info WorkerInfo) error {
	if info.ID != g.key {
		return fmt.Errorf("bus: update worker %s: entry is for %s", info.ID, g.key)
	}
	val, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("bus: encode worker %s: %w", info.ID, err)
	}
	g.mu.Lock()
	g.val = val
	g.mu.Unlock()
	if err := g.r.put(ctx, g.key, val); err != nil {
		return fmt.Errorf("bus: update worker %s: %w", info.ID, err)
	}
	return nil
}

func (g *Registration) value() []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.val
}

// Register puts info under its ID and refreshes it every TTL/3 until Close
// is called or ctx ends; both delete the entry. Refresh failures are logged
// and retried at the next tick (a lost entry is simply put again, a lost
// bucket recreated). When the NATS connection comes back after an outage
// the entry is put at once, so a restarted server learns of the worker
// without waiting for a tick.
func (r *Registry) Register(ctx context.Context, info WorkerInfo) (*Registration, error) {
	if err := ValidateName("worker id", info.ID); err != nil {
		return nil, err
	}
	val, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("bus: encode worker %s: %w", info.ID, err)
	}
	if err := r.put(ctx, info.ID, val); err != nil {
		return nil, fmt.Errorf("bus: register worker %s: %w", info.ID, err)
	}
	g := &Registration{r: r, key: info.ID, val: val, stop: make(chan struct{}), done: make(chan struct{})}
	go g.loop(ctx)
	return g, nil
}

// Join is a worker's start-up step on the bus: it opens the registry with
// cfg (openCtx bounds only that, ViaFrontend's wait included), hands the open
// registry to ready when ready is not nil, and then registers info, whose
// entry refreshes until ctx ends or the Registration is closed. ready runs
// before the entry is put, so whatever the worker vets against the registry
// (the addresses a decode worker may dial) works by the time a frontend can
// route to it.
func Join(openCtx, ctx context.Context, cfg RegistryConfig, info WorkerInfo, ready func(*Registry)) (*Registration, error) {
	if cfg.WorkerID == "" {
		cfg.WorkerID = info.ID
	}
	r, err := OpenRegistry(openCtx, cfg)
	if err != nil {
		return nil, err
	}
	if ready != nil {
		ready(r)
	}
	return r.Register(ctx, info)
}

func (g *Registration) loop(ctx context.Context) {
	defer close(g.done)
	every := g.r.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	up := g.r.nc.StatusChanged(nats.CONNECTED)
	defer g.r.nc.RemoveStatusListener(up)
	var failingSince time.Time // zero: the last refresh worked
	warned := false
	for {
		select {
		case <-ctx.Done():
			g.finish()
			return
		case <-g.stop:
			g.finish()
			return
		case <-up:
			t.Reset(every)
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := g.r.put(pctx, g.key, g.value())
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			// Retry soon: the entry must be back before it expires.
			t.Reset(min(every, retryEvery))
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			// A worker registered through a frontend sees a moment
			// without one when the frontend restarts, or stops first
			// (as up does): worth a warning only once the entry is
			// halfway to expiring.
			if !warned && (!g.r.viaFrontend || time.Since(failingSince) >= g.r.ttl/2) {
				warned = true
				g.r.log.Warn("registry refresh failed; retrying", "worker", g.key, "every", min(every, retryEvery), "err", err)
			}
		case err == nil && !failingSince.IsZero():
			failingSince = time.Time{}
			t.Reset(every)
			if warned {
				warned = false
				g.r.log.Info("registry refresh works again", "worker", g.key)
			}
		}
	}
}

// finish deletes the key unless the registration was abandoned.
func (g *Registration) finish() {
	g.mu.Lock()
	keep := g.keepEntry
	g.mu.Unlock()
	if keep {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var err error
	if g.r.viaFrontend {
		_, err = g.r.relay(ctx, g.key, registrarRequest{Op: opDelete})
	} else {
		err = g.r.bucket().Delete(ctx, g.key)
	}
	if err != nil {
		g.mu.Lock()
		g.closeErr = fmt.Errorf("bus: deregister worker %s: %w", g.key, err)
		g.mu.Unlock()
	}
}

// Close stops refreshing, deletes the entry and waits for the refresh loop.
func (g *Registration) Close() error {
	g.once.Do(func() { close(g.stop) })
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closeErr
}

// abandon stops refreshing without deleting, as a crashed worker would.
func (g *Registration) abandon() {
	g.mu.Lock()
	g.keepEntry = true
	g.mu.Unlock()
	g.Close()
}

// CheckCompatible reports why a worker cannot be routed to by a frontend
// serving model with blockSize; nil means it can. An empty model or zero
// blockSize accepts any. A worker serves model when model is its Model or
// one of its Aliases; its names must be distinct.
func CheckCompatible(w WorkerInfo, model string, blockSize int) error {
	if err := ValidateName("worker id", w.ID); err != nil {
		return err
	}
	switch w.Role {
	case RoleAggregated, RolePrefill, RoleDecode:
	default:
		return fmt.Errorf("bus: worker %s has unknown role %q (want %s, %s or %s)", w.ID, w.Role, RoleAggregated, RolePrefill, RoleDecode)
	}
	if w.BlockSize <= 0 {
		return fmt.Errorf("bus: worker %s has block size %d", w.ID, w.BlockSize)
	}
	names := map[string]bool{w.Model: true}
	for _, n := range w.Aliases {
		if n == "" || names[n] {
			return fmt.Errorf("bus: worker %s lists alias %q twice or empty", w.ID, n)
		}
		names[n] = true
	}
	for _, a := range w.Adapters {
		if a.Name == "" || names[a.Name] {
			return fmt.Errorf("bus: worker %s lists adapter %q twice, empty or as a model name too", w.ID, a.Name)
		}
		names[a.Name] = true
	}
	if model != "" && !w.ServesBase(model) {
		return fmt.Errorf("bus: worker %s serves model %q but the frontend serves %q", w.ID, w.Model, model)
	}
	if blockSize != 0 && w.BlockSize != blockSize {
		return fmt.Errorf("bus: worker %s uses block size %d but the frontend uses %d; its KV events would be mis-indexed", w.ID, w.BlockSize, blockSize)
	}
	return nil
}

// CheckNetworks reports why a worker's addresses fall outside networks; nil
// means they are inside, or networks is empty. Its HTTP URL's host and its
// kvxfer address's host must be IP addresses (a name could resolve anywhere
// later) inside one of the networks: a registry entry that points the
// frontend, or a decode worker, at an address outside the deployment is how
// a forged entry would steal prompts or turn workers into port scanners.
func CheckNetworks(w WorkerInfo, networks []netip.Prefix) error {
	if len(networks) == 0 {
		return nil
	}
	check := func(what, hostport string) error {
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			host = hostport
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return fmt.Errorf("bus: worker %s: %s host %q is not an IP address; with --worker-networks set, workers must register IP addresses", w.ID, what, host)
		}
		ip = ip.Unmap()
		for _, n := range networks {
			if n.Contains(ip) {
				return nil
			}
		}
		// The address itself goes to the log, not into the reason: /health
		// shows reasons to anyone.
		return fmt.Errorf("bus: worker %s: %s is outside --worker-networks", w.ID, what)
	}
	checkURL := func(what, raw string) error {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return fmt.Errorf("bus: worker %s: %s %q does not parse", w.ID, what, raw)
		}
		return check(what, u.Host)
	}
	if err := checkURL("http url", w.HTTPURL); err != nil {
		return err
	}
	if w.ProbeURL != "" {
		if err := checkURL("probe url", w.ProbeURL); err != nil {
			return err
		}
	}
	if w.KVXferAddr != "" {
		return check("kvxfer address", w.KVXferAddr)
	}
	return nil
}
