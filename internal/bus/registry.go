package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultTTL is how long a registry entry lives without a refresh. Workers
// refresh every TTL/3, so two refreshes can be lost before a live worker
// expires, and a dead one leaves routing within 6 s (the issue asks ≤ 10 s).
const DefaultTTL = 6 * time.Second

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
}

// Registry is the worker registry: a JetStream key-value bucket, one key per
// worker ID, whose entries expire TTL after their last refresh. It is safe
// for concurrent use.
type Registry struct {
	kv  jetstream.KeyValue
	ttl time.Duration
	log *slog.Logger
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
	kv, err := js.CreateKeyValue(ctx, kvCfg)
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		kvCfg.LimitMarkerTTL = 0
		kv, err = js.CreateKeyValue(ctx, kvCfg)
	}
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: open registry bucket %s: %w", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: registry bucket %s status: %w", bucket, err)
	}
	if st.TTL() > 0 {
		ttl = st.TTL()
	}
	return &Registry{kv: kv, ttl: ttl, log: log}, nil
}

// TTL is the entry lifetime in force for the bucket.
func (r *Registry) TTL() time.Duration { return r.ttl }

// Registration keeps one worker's entry alive. Close deletes it.
type Registration struct {
	r    *Registry
	key  string
	val  []byte
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu        sync.Mutex // guards keepEntry and closeErr
	keepEntry bool       // set by abandon: stop refreshing but leave the key to expire
	closeErr  error
}

// Register puts info under its ID and refreshes it every TTL/3 until Close
// is called or ctx ends; both delete the entry. Refresh failures are logged
// and retried at the next tick (a lost entry is simply put again).
func (r *Registry) Register(ctx context.Context, info WorkerInfo) (*Registration, error) {
	if err := ValidateName("worker id", info.ID); err != nil {
		return nil, err
	}
	val, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("bus: encode worker %s: %w", info.ID, err)
	}
	if _, err := r.kv.Put(ctx, info.ID, val); err != nil {
		return nil, fmt.Errorf("bus: register worker %s: %w", info.ID, err)
	}
	g := &Registration{r: r, key: info.ID, val: val, stop: make(chan struct{}), done: make(chan struct{})}
	go g.loop(ctx)
	return g, nil
}

func (g *Registration) loop(ctx context.Context) {
	defer close(g.done)
	every := g.r.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.finish()
			return
		case <-g.stop:
			g.finish()
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, every)
			_, err := g.r.kv.Put(pctx, g.key, g.val)
			cancel()
			if err != nil && ctx.Err() == nil {
				g.r.log.Warn("registry refresh failed; retrying", "worker", g.key, "err", err)
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
	if err := g.r.kv.Delete(ctx, g.key); err != nil {
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
// blockSize accepts any.
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
	if model != "" && w.Model != model {
		return fmt.Errorf("bus: worker %s serves model %q but the frontend serves %q", w.ID, w.Model, model)
	}
	if blockSize != 0 && w.BlockSize != blockSize {
		return fmt.Errorf("bus: worker %s uses block size %d but the frontend uses %d; its KV events would be mis-indexed", w.ID, w.BlockSize, blockSize)
	}
	return nil
}
