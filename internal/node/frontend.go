package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/switchyard-llm/switchyard/internal/admit"
	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/enginetok"
	"github.com/switchyard-llm/switchyard/internal/frontend"
	"github.com/switchyard-llm/switchyard/internal/gate"
	"github.com/switchyard-llm/switchyard/internal/h1"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/replica"
	"github.com/switchyard-llm/switchyard/internal/router"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// FrontendConfig configures a frontend node.
type FrontendConfig struct {
	HTTPAddr string // listen address; "127.0.0.1:0" picks a free port

	NC          *nats.Conn // required
	Subjects    bus.Subjects
	RegistryTTL time.Duration // 0: the bus default

	// Model is the one model served; "" serves every model workers
	// register (a fleet).
	Model     string
	BlockSize int
	// BlockSizes overrides BlockSize per model (by the workers' Model).
	BlockSizes map[string]int
	// Models are per-model settings (the fleet config file), by the
	// workers' Model; models not named take the fields above.
	Models map[string]ModelSettings
	// Tokenizer tokenizes prompts and chats for routing (nil: cl100k).
	Tokenizer tokenizer.Encoder
	// EngineTokenizer, instead, asks the workers' POST /tokenize
	// (--tokenizer engine); Tokenizer must then be nil.
	EngineTokenizer bool

	Policy string  // router policy; "" means kv
	Alpha  float64 // kv cost weight; 0 means 1
	// TierBlind makes kv count lower-tier (host memory, disk) hits as
	// misses instead of pricing them.
	TierBlind bool
	Seed      uint64

	Disagg     string // never, always or auto
	Margin     float64
	TTFTSLO    time.Duration
	ITLSLO     time.Duration
	ProbeBytes int64 // link probe size; 0: the gate default

	APIKey, AdminKey string
	// WorkerKey is sent to workers' admin and probe endpoints; it must
	// match their WorkerKey.
	WorkerKey string

	// Upstream bounds, passed to frontend.Config; zero takes its defaults.
	HeaderTimeout  time.Duration // streaming: wait for a worker's response headers
	RequestTimeout time.Duration // whole upstream exchange, and a non-streaming generation
	MaxBodyBytes   int64         // request body limit
	EjectAfter     int           // consecutive connect failures that eject a worker; 0: 2

	// Client-side bounds; zero takes the defaults (see frontend.Config).
	ClientHeaderTimeout time.Duration // reading a request's headers; 0: 10 s
	ClientReadTimeout   time.Duration // reading its body
	ClientIdleTimeout   time.Duration // an idle keep-alive connection; 0: 60 s
	ClientStallTimeout  time.Duration // a client that stopped reading
	// NetHTTPServer serves clients with net/http's server instead of
	// internal/h1 (--http-server net/http): the same handlers, slower per
	// request (docs/proxy-bench.md).
	NetHTTPServer        bool
	MaxConnections       int
	MaxInflight          int
	MaxInflightPerWorker int
	// Admission (see frontend.Config): the queue's bounds and the tenants.
	MaxQueue     int
	QueueTimeout time.Duration
	DrainTimeout time.Duration  // --drain-timeout: the cli's wait in Drain
	QueueTTFT    time.Duration  // --queue-ttft: a worker queued past it counts as full
	TenantsFile  string         // --tenants, loaded into Tenants by the cli
	ConfigFile   string         // --config, loaded into Models by the cli
	Tenants      *admit.Tenants // nil: one default tenant
	Pprof        bool           // /debug/pprof/ behind the admin key

	SilenceAfter time.Duration // KV events; 0: the kvevents default

	// ShareState shares routing state with the other frontend replicas on
	// the bus (package replica); ReplicaID names this one among them ("":
	// random).
	ShareState bool
	ReplicaID  string
	// WorkerNetworks, when set, refuses workers whose HTTP URL or kvxfer
	// address is outside them (bus.CheckNetworks).
	WorkerNetworks []netip.Prefix

	// LinkLabel marks every link as emulated in reports, e.g.
	// "1 Gbit/s (emulated)"; empty for real links.
	LinkLabel string

	Registry *prometheus.Registry // nil: a new one
	Logger   *slog.Logger
}

// ModelSettings are one model's own settings; zero fields take the
// frontend's.
type ModelSettings struct {
	BlockSize int
	// Tokenizer tokenizes the model's prompts; EngineTokenizer asks its
	// workers instead.
	Tokenizer       tokenizer.Encoder
	EngineTokenizer bool
	Policy          string  // router policy
	Alpha           float64 // kv weight; 0: the frontend's
	Disagg          string  // never, always or auto
}

// Frontend is a running frontend node.
type Frontend struct {
	cfg      FrontendConfig
	log      *slog.Logger
	index    *kvindex.Index
	router   *router.Router
	consumer *kvevents.Consumer
	watcher  *bus.Watcher
	gate     *gate.Gate
	share    *replica.Sharer // nil: sharing off
	peerLoad peerLoad        // the peers' requests in flight per worker
	server   *frontend.Server
	live     atomic.Pointer[frontend.Server] // server, for onChange, which runs before it is set
	http     httpServer
	url      string
	client   *http.Client

	// probeMu serialises link probes: probes that share a prefill
	// worker's egress would each measure a fraction of the link.
	probeMu sync.Mutex

	loadMu sync.RWMutex // guards loads and adapters
	loads  map[string]bus.LoadReport
	// adapters holds, per worker, when this frontend last sent it a
	// request for each LoRA adapter: the adapter is in its GPU memory from
	// then on, before a load report can say so.
	adapters map[string]map[string]time.Time

	decMu     sync.Mutex // guards decisions
	decisions map[string]gate.Decision

	changed chan struct{} // signalled (non-blocking) on every registry change
	// probeKick asks the prober goroutine to look for new prefill → decode
	// pairs. onChange only signals it: it runs on the watcher's goroutine,
	// also during WatchWorkers, before f.watcher is set.
	probeKick chan struct{}

	cancel context.CancelFunc // stops every goroutine below
	done   <-chan struct{}    // closed when cancel is called
	wg     sync.WaitGroup
	subs   []*nats.Subscription
}

// StartFrontend starts a frontend node and returns once it serves HTTP and
// has read the current worker registry.
//
// The result is unnamed on purpose: f below is the node that the deferred
// Close and every goroutine use, and a "return nil, err" must not clear it.
func StartFrontend(ctx context.Context, cfg FrontendConfig) (_ *Frontend, err error) {
	if cfg.NC == nil {
		return nil, errors.New("node: frontend needs a NATS connection")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	// go_goroutines, go_memstats_*, process_resident_memory_bytes: leaks
	// and growth show on /metrics. A registry that has them already is fine.
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := cfg.Registry.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return nil, fmt.Errorf("node: runtime metrics: %w", err)
		}
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 16
	}
	modelDisagg := map[string]string{}
	blockSizes := maps.Clone(cfg.BlockSizes) // not the caller's map
	for name, m := range cfg.Models {
		if m.BlockSize > 0 {
			if blockSizes == nil {
				blockSizes = map[string]int{}
			}
			blockSizes[name] = m.BlockSize
		}
		if m.Disagg != "" {
			modelDisagg[name] = m.Disagg
		}
	}
	cfg.BlockSizes = blockSizes
	// Listen first: a taken port is the likeliest start-up failure, and
	// nothing else should start (or log) before it is known.
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("node: frontend: listen on %s: %w (pick another --http-addr)", cfg.HTTPAddr, err)
	}
	defer func() {
		if err != nil {
			ln.Close()
		}
	}()
	f := &Frontend{
		cfg: cfg, log: cfg.Logger.With("component", "frontend"),
		loads: map[string]bus.LoadReport{}, adapters: map[string]map[string]time.Time{}, decisions: map[string]gate.Decision{},
		client:    &http.Client{Timeout: 5 * time.Minute},
		changed:   make(chan struct{}, 1),
		probeKick: make(chan struct{}, 1),
	}
	// The frontend outlives the ctx it was started with (that one bounds
	// start-up only); runCtx ends at Close.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f.cancel, f.done = cancel, runCtx.Done()
	defer func() {
		if err != nil {
			f.Close()
		}
	}()

	f.index = kvindex.New(kvindex.Config{})
	if cfg.ShareState && cfg.ReplicaID == "" {
		cfg.ReplicaID = replica.RandomID()
		f.cfg.ReplicaID = cfg.ReplicaID
	}
	if f.router, err = router.New(router.Config{Index: f.index, Policy: cfg.Policy, Alpha: cfg.Alpha, Seed: cfg.Seed, TierBlind: cfg.TierBlind,
		RotationStart: rotationStart(cfg.ReplicaID), ApproxOffPath: true}); err != nil {
		return nil, err
	}
	if err = f.router.Register(cfg.Registry); err != nil {
		return nil, fmt.Errorf("node: router metrics: %w", err)
	}
	mode := gate.Mode(cfg.Disagg)
	if mode == "" {
		mode = gate.ModeAuto
	}
	if f.gate, err = gate.New(gate.Config{Mode: mode, Margin: cfg.Margin, TTFTSLO: cfg.TTFTSLO, ITLSLO: cfg.ITLSLO, ProbeBytes: cfg.ProbeBytes, Registerer: cfg.Registry}); err != nil {
		return nil, err
	}
	if f.consumer, err = kvevents.NewConsumer(kvevents.ConsumerConfig{
		NC: cfg.NC, Subjects: cfg.Subjects, Index: f.index, SilenceAfter: cfg.SilenceAfter, Logger: f.log,
		RegisteredOnly: true, // a refused worker's events must never reach the index
	}); err != nil {
		return nil, err
	}
	if err = f.consumer.Register(cfg.Registry); err != nil {
		return nil, fmt.Errorf("node: event metrics: %w", err)
	}
	f.goRun("kv events", func() error { return f.consumer.Run(runCtx) })

	reg, err := bus.OpenRegistry(ctx, bus.RegistryConfig{NC: cfg.NC, Subjects: cfg.Subjects, TTL: cfg.RegistryTTL, Logger: f.log})
	if err != nil {
		return nil, err
	}
	if f.watcher, err = reg.WatchWorkers(runCtx, bus.WatchConfig{Model: cfg.Model, BlockSize: cfg.BlockSize, BlockSizes: cfg.BlockSizes, OnChange: f.onChange, Logger: f.log, Networks: cfg.WorkerNetworks,
		Alive: f.workerAlive}); err != nil {
		return nil, err
	}
	if err = f.watcher.Register(cfg.Registry); err != nil {
		return nil, fmt.Errorf("node: registry metrics: %w", err)
	}
	// Workers that log in with their own credentials register through
	// a frontend (they have no JetStream rights).
	registrar, err := reg.StartRegistrar()
	if err != nil {
		return nil, err
	}
	f.subs = append(f.subs, registrar.Subscription())
	if err = registrar.Register(cfg.Registry); err != nil {
		return nil, fmt.Errorf("node: registrar metrics: %w", err)
	}
	// Load and transfer reports are accepted only from registered workers,
	// so they subscribe once the watcher exists.
	loads, err := bus.SubscribeLoad(cfg.NC, cfg.Subjects, f.observeLoad)
	if err != nil {
		return nil, err
	}
	f.subs = append(f.subs, loads.Subscription)
	if err = loads.Register(cfg.Registry); err != nil {
		return nil, fmt.Errorf("node: load metrics: %w", err)
	}
	sub, err := cfg.NC.Subscribe(cfg.Subjects.TransfersAll(), f.observeTransfer)
	if err != nil {
		return nil, fmt.Errorf("node: subscribe to transfers: %w", err)
	}
	f.subs = append(f.subs, sub)

	if cfg.ShareState {
		if f.share, err = replica.New(replica.Config{
			NC: cfg.NC, Subjects: cfg.Subjects, ID: cfg.ReplicaID, Apply: peerApplier{f}, Links: f.sharedLinks,
			ApproxTTL: f.router.ApproxTTL(), OnPeersChanged: f.kickProbes, Logger: f.log, Registerer: cfg.Registry,
		}); err != nil {
			return nil, err
		}
	}

	// WatchWorkers has delivered the existing entries to onChange already;
	// from here on the watcher is set, so new pairs can be probed.
	f.goRun("link probes", func() error {
		for {
			select {
			case <-runCtx.Done():
				return nil
			case <-f.probeKick:
				f.probeNewLinks(runCtx)
			}
		}
	})
	if f.share == nil {
		f.kickProbes()
	} // else: once the peers had a moment to answer (below)

	a := adapters{f}
	if cfg.EngineTokenizer && cfg.Model != "" {
		et, err := f.engineTokenizer(cfg.Model)
		if err != nil {
			return nil, err
		}
		cfg.Tokenizer = et
	}
	// In a fleet each model's prompts are tokenized by its own tokenizer:
	// the config file's, or its own workers' (--tokenizer engine).
	var engineToks sync.Map // model → *enginetok.Tokenizer
	engineTok := func(model string) frontend.Tokenizer {
		if t, ok := engineToks.Load(model); ok {
			return t.(*enginetok.Tokenizer)
		}
		et, err := f.engineTokenizer(model)
		if err != nil {
			f.log.Error("engine tokenizer", "model", model, "err", err)
			return nil
		}
		t, _ := engineToks.LoadOrStore(model, et)
		return t.(*enginetok.Tokenizer)
	}
	modelTok := func(model string) frontend.Tokenizer {
		if m, ok := cfg.Models[model]; ok {
			if m.Tokenizer != nil {
				return m.Tokenizer
			}
			if m.EngineTokenizer {
				return engineTok(model)
			}
		}
		if cfg.EngineTokenizer && cfg.Model == "" {
			return engineTok(model)
		}
		return nil
	}
	var settingsChanged func()
	if f.share != nil {
		settingsChanged = f.settingsChanged
	}
	f.server, err = frontend.New(frontend.Config{
		Model: cfg.Model, BlockSize: cfg.BlockSize, BlockSizes: cfg.BlockSizes, ModelDisagg: modelDisagg, APIKey: cfg.APIKey, AdminKey: cfg.AdminKey, WorkerKey: cfg.WorkerKey,
		HeaderTimeout: cfg.HeaderTimeout, RequestTimeout: cfg.RequestTimeout, MaxBodyBytes: cfg.MaxBodyBytes,
		EjectAfter: cfg.EjectAfter, ClientReadTimeout: cfg.ClientReadTimeout, ClientStallTimeout: cfg.ClientStallTimeout,
		MaxConnections: cfg.MaxConnections, MaxInflight: cfg.MaxInflight, MaxInflightPerWorker: cfg.MaxInflightPerWorker,
		MaxQueue: cfg.MaxQueue, QueueTimeout: cfg.QueueTimeout, Tenants: cfg.Tenants, QueueTTFT: cfg.QueueTTFT,
		Pprof:      cfg.Pprof,
		DisaggMode: string(mode), SettingsChanged: settingsChanged, Registry: cfg.Registry, Logger: f.log,
	}, frontend.Deps{
		Workers: a, Router: a, InFlight: sharedInFlight{f.router, f.share, newExpectations(f.consumer)}, Events: a, Gate: a, Index: a,
		Links: a, Prober: a, GateInfo: a, Predictor: a, Bus: a, Cluster: a,
		Tokenizer: cfg.Tokenizer, ModelTokenizer: modelTok, Peers: &f.peerLoad, Queue: a,
		Responses: f.share,
	})
	if err != nil {
		return nil, err
	}
	f.live.Store(f.server)
	if f.share != nil {
		f.goRun("replica sharing", func() error { return f.share.Run(runCtx) })
		f.goRun("first link probes", func() error {
			// Peers answer the hello within milliseconds; then the leader
			// (and only it) probes what no peer measured.
			select {
			case <-runCtx.Done():
			case <-time.After(300 * time.Millisecond):
				f.kickProbes()
			}
			return nil
		})
	}
	f.url = "http://" + ln.Addr().String()
	// No ReadTimeout or WriteTimeout: streams run for minutes. The body
	// read and every write are bounded per request instead (frontend.Config
	// ClientReadTimeout, ClientStallTimeout).
	if cfg.NetHTTPServer {
		f.http = &http.Server{Handler: f.server.Handler(),
			ReadHeaderTimeout: cmp.Or(cfg.ClientHeaderTimeout, 10*time.Second),
			IdleTimeout:       cmp.Or(cfg.ClientIdleTimeout, 60*time.Second),
		}
	} else {
		f.http = &h1.Server{Handler: f.server.Handler(), Logger: f.log,
			HeaderTimeout: cfg.ClientHeaderTimeout, IdleTimeout: cfg.ClientIdleTimeout}
	}
	f.goRun("http", func() error {
		if err := f.http.Serve(f.server.Listener(ln)); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return f, nil
}

// httpServer is what the frontend needs of its client-facing server:
// internal/h1's or net/http's.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// engineTokenizer asks model's workers to tokenize (--tokenizer engine).
func (f *Frontend) engineTokenizer(model string) (*enginetok.Tokenizer, error) {
	return enginetok.New(enginetok.Config{Model: model, Logger: f.log, Workers: func() []string {
		var urls []string
		for _, w := range f.watcher.Workers() {
			// Prefill workers run the same model; any will do.
			if w.ServesBase(model) {
				urls = append(urls, w.HTTPURL)
			}
		}
		return urls
	}})
}

func (f *Frontend) goRun(what string, fn func() error) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := fn(); err != nil && !f.closed() {
			f.log.Error("frontend component stopped", "component", what, "err", err)
		}
	}()
}

// WaitWorkers waits until at least n workers are routable and their KV
// events (where enabled) are healthy, or ctx ends.
func (f *Frontend) WaitWorkers(ctx context.Context, n int) error {
	tick := time.NewTicker(100 * time.Millisecond) // event health changes without a registry change
	defer tick.Stop()
	for {
		ws := f.watcher.Workers()
		ready := 0
		for _, w := range ws {
			if !w.KVEventsEnabled || f.consumer.Health(w.ID) == kvevents.StateHealthy {
				ready++
			}
		}
		if ready >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: %d of %d workers ready after waiting: %w (see the log above for why)", ready, n, ctx.Err())
		case <-f.changed:
		case <-tick.C:
		}
	}
}

// URL is the frontend's HTTP base URL.
func (f *Frontend) URL() string { return f.url }

// Server is the HTTP server, for tests.
func (f *Frontend) Server() *frontend.Server { return f.server }

// Close stops the frontend and waits for it.
// Drain stops the frontend taking new requests (503, /health "draining")
// and returns when the requests it serves are done or after timeout,
// whichever is first, reporting how many were left. Close it after.
func (f *Frontend) Drain(timeout time.Duration) int64 {
	if f.server == nil {
		return 0
	}
	f.server.SetDraining(true)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond) // well below a request's length
	defer tick.Stop()
	for {
		if n := f.server.Serving(); n == 0 {
			return 0
		}
		select {
		case <-deadline.C:
			return f.server.Serving()
		case <-tick.C:
		}
	}
}

func (f *Frontend) Close() error {
	for _, s := range f.subs {
		_ = s.Unsubscribe()
	}
	if f.http != nil {
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := f.http.Shutdown(shut); err != nil {
			// Streams still open after 5 s are cut: they end with an
			// error the client sees, rather than outliving the components
			// they use.
			_ = f.http.Close()
		}
		cancel()
	}
	f.cancel()
	if f.watcher != nil {
		_ = f.watcher.Close()
	}
	if f.server != nil {
		f.server.Close()
	}
	f.wg.Wait()
	return nil
}

// onChange keeps the consumer, index, router and link probes in step with
// the registry.
func (f *Frontend) onChange(c bus.Change) {
	defer func() {
		select {
		case f.changed <- struct{}{}:
		default:
		}
	}()
	id := c.Worker.ID
	switch c.Kind {
	case bus.WorkerAdded, bus.WorkerUpdated:
		f.consumer.SetExpected(id, c.Worker.KVEventsEnabled)
		f.consumer.ExpectEpoch(id, c.Worker.Epoch)
		f.kickProbes()
	case bus.WorkerRemoved, bus.WorkerRefused:
		if srv := f.live.Load(); c.Kind == bus.WorkerRemoved && !c.Deregistered && srv != nil {
			// Expired: the worker may be partitioned or dead with its
			// connections still open; what it does will not reach anyone.
			srv.CancelWorker(id, c.Reason)
		}
		f.consumer.Forget(id)
		f.router.Forget(id)
		f.gate.Links().Forget(id)
		f.loadMu.Lock()
		delete(f.loads, id)
		delete(f.adapters, id)
		f.loadMu.Unlock()
	}
}

// aliveTimeout bounds the check of a worker whose registry entry went
// stale: the frontend's connect timeout, within which a serving process
// answers its /health.
const aliveTimeout = 2 * time.Second

// workerAlive asks worker w's GET /health; any answer below 500 means the
// process serves. The registry asks before dropping a worker whose entry
// went unrefreshed: a worker whose link to the bus froze still serves its
// streams, and cutting them would cost the requests the bus fault did not.
func (f *Frontend) workerAlive(ctx context.Context, w bus.WorkerInfo) error {
	ctx, cancel := context.WithTimeout(ctx, aliveTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.HTTPURL+"/health", nil)
	if err != nil {
		return fmt.Errorf("node: health check of %s: %w", w.ID, err)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return fmt.Errorf("node: health check of %s: %w", w.ID, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return fmt.Errorf("node: health check of %s: status %d", w.ID, resp.StatusCode)
	}
	return nil
}

func (f *Frontend) observeLoad(r bus.LoadReport) {
	w, ok := f.watcher.Worker(r.WorkerID)
	if !ok {
		return // a departed or unknown worker must not leave state behind
	}
	f.loadMu.Lock()
	f.loads[r.WorkerID] = r
	f.loadMu.Unlock()
	bs := w.BlockSize // its model's; the registry refused any other
	f.router.ObserveLoad(r.WorkerID, router.LoadReport{
		QueuedPrefillBlocks: (r.QueuedPrefillTokens + bs - 1) / bs,
		ActiveDecodeBlocks:  r.ActiveDecodeBlocks,
		Running:             r.Running, Waiting: r.Waiting,
		TakenAt: time.Unix(0, r.UnixNano),
	})
}

// adapterHeldFor is how long a worker counts as holding an adapter this
// frontend sent it a request for: past a load report's lag (250 ms), so
// the report speaks by then, and past the requests that follow a first one
// in a burst.
const adapterHeldFor = 2 * time.Second

// routedAdapter notes that worker was sent a request for adapter.
func (f *Frontend) routedAdapter(worker, adapter string) {
	f.loadMu.Lock()
	defer f.loadMu.Unlock()
	m := f.adapters[worker]
	if m == nil {
		m = map[string]time.Time{}
		f.adapters[worker] = m
	}
	m[adapter] = time.Now()
}

// adapterState is where adapter stands on worker, from its last load
// report (vLLM's lora_requests_info) and this frontend's recent requests.
func (f *Frontend) adapterState(worker, adapter string) router.AdapterState {
	f.loadMu.RLock()
	defer f.loadMu.RUnlock()
	if t, ok := f.adapters[worker][adapter]; ok && time.Since(t) < adapterHeldFor {
		return router.AdapterReady
	}
	l := f.loads[worker].LoRA
	if l == nil {
		return router.AdapterLoad // no word of its slots
	}
	if slices.Contains(l.Running, adapter) || slices.Contains(l.Resident, adapter) {
		return router.AdapterReady
	}
	if l.Max > 0 && max(len(l.Running), len(l.Resident)) >= l.Max {
		return router.AdapterSwap
	}
	return router.AdapterLoad
}

func (f *Frontend) load(id string) (bus.LoadReport, bool) {
	f.loadMu.RLock()
	defer f.loadMu.RUnlock()
	r, ok := f.loads[id]
	return r, ok && time.Since(time.Unix(0, r.UnixNano)) < 2*time.Second
}

func (f *Frontend) observeTransfer(m *nats.Msg) {
	var t TransferReport
	if err := json.Unmarshal(m.Data, &t); err != nil || t.From == "" || t.To == "" || t.Seconds <= 0 || t.Bytes <= 0 {
		return
	}
	// A worker reports only its own pulls: on an authenticated bus the
	// subject is the one part of the message the server vouches for.
	if strings.TrimPrefix(m.Subject, f.cfg.Subjects.TransfersPrefix()) != t.To {
		return
	}
	// Only links between registered workers: a report naming anything else
	// would grow the estimator (and its metric labels) without bound.
	p, okP := f.watcher.Worker(t.From)
	d, okD := f.watcher.Worker(t.To)
	if !okP || !okD || p.Role != bus.RolePrefill || d.Role != bus.RoleDecode {
		return
	}
	f.gate.Links().Observe(t.From, t.To, t.Bytes, time.Duration(t.Seconds*float64(time.Second)))
}

func (f *Frontend) closed() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

func (f *Frontend) kickProbes() {
	select {
	case f.probeKick <- struct{}{}:
	default:
	}
}

// probeNewLinks measures every prefill → decode pair the gate has not seen,
// in the background: an unmeasured link counts as too slow until then.
func (f *Frontend) probeNewLinks(ctx context.Context) {
	var prefill, decode []bus.WorkerInfo
	for _, w := range f.watcher.Workers() {
		switch w.Role {
		case bus.RolePrefill:
			prefill = append(prefill, w)
		case bus.RoleDecode:
			decode = append(decode, w)
		}
	}
	if !f.share.Leader() {
		return // the replica with the smallest ID probes for all
	}
	links := f.gate.Links()
	for _, p := range prefill {
		for _, d := range decode {
			if p.Model != d.Model {
				continue // a prefill worker serves only its own model's decode workers
			}
			if !links.NeedsProbe(p.ID, d.ID) || !links.MarkProbing(p.ID, d.ID) {
				continue
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				if _, err := f.probe(ctx, p, d, f.gate.Config().ProbeBytes); err != nil {
					links.ProbeFailed(p.ID, d.ID)
					f.log.Warn("link probe failed; remote prefill stays off for this pair until a probe succeeds",
						"from", p.ID, "to", d.ID, "err", err)
				}
			}()
		}
	}
}

// probe asks decode worker d to pull probe bytes from prefill worker p's
// KV transfer server, and feeds the result to the link estimator.
func (f *Frontend) probe(ctx context.Context, p, d bus.WorkerInfo, nbytes int64) (ProbeResponse, error) {
	var out ProbeResponse
	if p.KVXferAddr == "" {
		return out, fmt.Errorf("node: prefill worker %s has no KV transfer address", p.ID)
	}
	f.probeMu.Lock()
	defer f.probeMu.Unlock()
	body, _ := json.Marshal(ProbeRequest{EngineID: p.ID, Addr: p.KVXferAddr, Bytes: nbytes})
	base := d.HTTPURL
	if d.ProbeURL != "" {
		base = d.ProbeURL // a bridge answers for the real engine behind it
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/kvxfer/probe", bytesReader(body))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/json")
	if f.cfg.WorkerKey != "" {
		req.Header.Set("Authorization", "Bearer "+f.cfg.WorkerKey)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return out, fmt.Errorf("node: probe %s → %s: %w", p.ID, d.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return out, fmt.Errorf("node: probe %s → %s: worker %s answered %d: %s", p.ID, d.ID, d.ID, resp.StatusCode, e.Error.Message)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("node: probe %s → %s: %w", p.ID, d.ID, err)
	}
	f.gate.Links().ObserveProbe(p.ID, d.ID, out.BytesPerSec, time.Duration(out.RTTMillis*float64(time.Millisecond)))
	f.share.Probed(replica.Link{From: p.ID, To: d.ID, BytesPerSec: out.BytesPerSec, RTTMillis: out.RTTMillis})
	return out, nil
}
