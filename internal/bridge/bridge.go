package bridge

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvxfer"
	"github.com/switchyard-llm/switchyard/internal/node"
)

// Engines a bridge knows; they differ in their metric names.
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
)

// Defaults for Config.
const (
	DefaultRebuildHold   = 10 * time.Second
	DefaultReplayTimeout = 2 * time.Second
	DefaultScrapeEvery   = 500 * time.Millisecond
	DefaultStartTimeout  = 10 * time.Minute
	// DefaultNamesEvery: an adapter loaded at run time is routable within
	// this plus one registry put.
	DefaultNamesEvery = 2 * time.Second
	DefaultTailPoll   = time.Second
	// DefaultReplayBufferSteps is vLLM's default buffer_steps.
	DefaultReplayBufferSteps = 10000
)

// Config configures a Bridge.
type Config struct {
	ID     string // worker id in the registry
	Role   string // bus.RoleAggregated, RolePrefill or RoleDecode
	Engine string // EngineVLLM or EngineSGLang
	// EngineURL is the engine's OpenAI endpoint, e.g. http://10.0.0.5:8000;
	// it is what the registry gives the frontend.
	EngineURL string
	// APIs are the endpoints beyond chat and completions the engine
	// serves, as the registry names them; nil: probe the engine for them
	// at start (an empty list: none).
	APIs []string
	// Model and MaxModelLen: "" / 0 means take the engine's (GET
	// /v1/models); when given and the engine disagrees, Start fails.
	Model       string
	MaxModelLen int
	// BlockSize must equal the engine's and the frontend's (default 16).
	BlockSize       int
	KVBytesPerToken int
	// KVEvents is the engine's PUB endpoint to dial (vLLM's default
	// binds tcp://*:5557), or KVEventsListen an endpoint to bind for an
	// engine configured to connect. Exactly one is set.
	KVEvents       string
	KVEventsListen string
	// KVReplay is the engine's replay ROUTER endpoint; "" disables replay,
	// so any loss leads to a rebuild.
	KVReplay string
	// ReplayBufferSteps is the engine's replay buffer size in batches
	// (vLLM's buffer_steps); 0 means DefaultReplayBufferSteps, vLLM's
	// default. A replay reply shorter than this holds the engine's whole
	// history (see the package doc, "First contact is not loss").
	ReplayBufferSteps int
	// Topic filters the engine's messages by prefix ("" takes all).
	Topic string
	// HTTPAddr is where the bridge serves /metrics and /health; "" none.
	HTTPAddr    string
	NC          *nats.Conn
	Subjects    bus.Subjects
	RegistryTTL time.Duration
	// RegistryViaFrontend: register through a frontend, never touching
	// JetStream (see bus.RegistryConfig.ViaFrontend); set when the bridge
	// logs in as its worker on a server that holds workers to their
	// permissions.
	RegistryViaFrontend bool

	// KVXferAddr, for the prefill role, is where the bridge serves a
	// kvxfer endpoint and registers it, so the frontend can measure the
	// link from this host to a decode engine's; it serves probe payloads
	// only (the engine's KV moves by its own connector). "" serves none.
	// A decode bridge answers the frontend's probes on HTTPAddr.
	KVXferAddr      string
	KVXferServerTLS *tls.Config // nil: plain TCP
	KVXferClientTLS *tls.Config // a decode bridge dials prefill bridges with it
	// WorkerKey is the bearer token POST /kvxfer/probe requires, and the
	// kvxfer probe key; "" admits loopback clients only. It is also sent
	// on GET /v1/models to the engine, which the frontend reaches with it.
	WorkerKey string
	// Profile is the engine's timing profile (perfmodel.NewProfile from
	// GPU and model presets), registered so the gate can predict its
	// prefill time. Zero: none, and the gate keeps prefill local.
	Profile bus.Profile

	RebuildHold   time.Duration // 0: DefaultRebuildHold
	ReplayTimeout time.Duration // 0: DefaultReplayTimeout
	ScrapeEvery   time.Duration // 0: DefaultScrapeEvery
	StartTimeout  time.Duration // how long to wait for the engine; 0: DefaultStartTimeout
	// NamesEvery is how often the engine's /v1/models is read again, so
	// adapters loaded or unloaded at run time reach the registry; 0:
	// DefaultNamesEvery.
	NamesEvery time.Duration
	// TailPoll is how long the engine's stream must be idle before the
	// bridge asks replay whether a batch was lost; 0: DefaultTailPoll.
	TailPoll   time.Duration
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// Status is what a bridge has seen, for /health, metrics and tests.
type Status struct {
	Synced  bool   `json:"synced"`
	LastSeq uint64 `json:"last_seq"`
	// FirstSeq is the number of the engine run's first batch, when seen
	// (vLLM's is 0).
	FirstSeq       uint64    `json:"first_seq"`
	Batches        uint64    `json:"batches"`
	Malformed      uint64    `json:"malformed"`
	Gaps           uint64    `json:"gaps"`
	Restarts       uint64    `json:"restarts"`
	ReplaysCovered uint64    `json:"replays_covered"`
	ReplaysShort   uint64    `json:"replays_short"`
	ReplaysFailed  uint64    `json:"replays_failed"`
	Rebuilds       uint64    `json:"rebuilds"`
	RebuildUntil   time.Time `json:"rebuild_until,omitzero"`
	RebuildCause   string    `json:"rebuild_cause,omitempty"`
	MirrorBlocks   int       `json:"mirror_blocks"`
	Mirror         Stats     `json:"mirror"`
	EngineUp       bool      `json:"engine_up"`
	Load           bus.LoadReport
}

// Bridge is a running bridge. Its methods are safe for concurrent use.
type Bridge struct {
	cfg  Config
	log  *slog.Logger
	pub  *kvevents.Publisher
	info bus.WorkerInfo // guarded by mu once the bridge runs: its names change
	sub  zmq4.Socket
	srv  *http.Server
	ln   net.Listener
	xfer *kvxfer.Server // prefill role with KVXferAddr: probe payloads only
	prob *node.Prober   // decode role with an HTTP listener

	mu     sync.Mutex // guards mirror, st, names, info and the publisher's sequence (PublishStep runs under it)
	mirror *Mirror
	st     Status
	names  engineModels // what the engine's /v1/models listed last

	live     chan [][]byte
	restarts chan struct{} // the engine's process start time changed
	started  float64       // the engine's process_start_time_seconds, 0 until seen
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	done     chan struct{}
	once     sync.Once
	errMu    sync.Mutex
	err      error
	reg      *bus.Registration

	malLog rateLog
}

// rateLog rate-limits one kind of log line.
type rateLog struct {
	mu   sync.Mutex
	last time.Time
	supp int
}

func (r *rateLog) log(l *slog.Logger, msg string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.last) < 5*time.Second {
		r.supp++
		return
	}
	l.Warn(msg, append(args, "suppressed", r.supp)...)
	r.last, r.supp = time.Now(), 0
}

func (c *Config) validate() error {
	switch {
	case c.ID == "":
		return errors.New("bridge: no worker id")
	case c.EngineURL == "":
		return errors.New("bridge: no engine URL (give --engine-url http://HOST:PORT)")
	case (c.KVEvents == "") == (c.KVEventsListen == ""):
		return errors.New("bridge: give exactly one of --kv-events (dial the engine's PUB socket) and --kv-events-listen (bind for an engine that connects)")
	case c.NC == nil:
		return errors.New("bridge: no NATS connection (give --nats URL)")
	case c.Engine != EngineVLLM && c.Engine != EngineSGLang:
		return fmt.Errorf("bridge: engine %q: want vllm or sglang", c.Engine)
	case c.KVXferAddr != "" && c.Role != bus.RolePrefill:
		return fmt.Errorf("bridge: --kvxfer-addr is for --role prefill; a decode bridge answers link probes on its --http-addr")
	}
	if c.Role == "" {
		c.Role = bus.RoleAggregated
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.RebuildHold <= 0 {
		c.RebuildHold = DefaultRebuildHold
	}
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = DefaultReplayTimeout
	}
	if c.ScrapeEvery <= 0 {
		c.ScrapeEvery = DefaultScrapeEvery
	}
	if c.TailPoll <= 0 {
		c.TailPoll = DefaultTailPoll
	}
	if c.ReplayBufferSteps <= 0 {
		c.ReplayBufferSteps = DefaultReplayBufferSteps
	}
	if c.NamesEvery <= 0 {
		c.NamesEvery = DefaultNamesEvery
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.EngineURL = strings.TrimRight(c.EngineURL, "/")
	return nil
}

// Start connects to the engine and the bus and returns once the engine is
// registered. It waits for the engine's /v1/models for up to StartTimeout.
func Start(ctx context.Context, cfg Config) (*Bridge, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("worker", cfg.ID, "engine", cfg.EngineURL)
	b := &Bridge{cfg: cfg, log: log, mirror: NewMirror(cfg.BlockSize), live: make(chan [][]byte, 256), restarts: make(chan struct{}, 1), done: make(chan struct{})}
	model, maxLen, err := b.discover(ctx)
	if err != nil {
		return nil, err
	}
	b.pub, err = kvevents.NewPublisher(kvevents.PublisherConfig{NC: cfg.NC, Subjects: cfg.Subjects, WorkerID: cfg.ID, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	if cfg.HTTPAddr != "" {
		if b.ln, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("bridge: listen on %s: %w (pick another --http-addr)", cfg.HTTPAddr, err)
		}
	}
	if cfg.KVXferAddr != "" {
		// Pulls need leases, which only an engine's own KV could back, so
		// this server answers probes and refuses every pull.
		bb := cfg.BlockSize * cfg.KVBytesPerToken
		if bb <= 0 || bb%8 != 0 {
			bb = 8
		}
		xc := kvxfer.ServerConfig{Addr: cfg.KVXferAddr, TLS: cfg.KVXferServerTLS, BlockBytes: bb, Logger: log, ProbeKey: cfg.WorkerKey}
		if b.xfer, err = kvxfer.NewServer(xc); err == nil {
			err = b.xfer.Start()
		}
		if err != nil {
			if b.ln != nil {
				b.ln.Close()
			}
			return nil, fmt.Errorf("bridge: kvxfer on %s: %w (pick another --kvxfer-addr)", cfg.KVXferAddr, err)
		}
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel = cancel
	b.sub = zmq4.NewSub(runCtx, zmq4.WithAutomaticReconnect(true), zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(200*time.Millisecond),
		zmq4.WithLogger(slogStd(log)))
	if err := b.sub.SetOption(zmq4.OptionSubscribe, cfg.Topic); err != nil {
		b.closeEarly()
		return nil, fmt.Errorf("bridge: subscribe: %w", err)
	}
	if cfg.KVEventsListen != "" {
		if err := b.sub.Listen(cfg.KVEventsListen); err != nil {
			b.closeEarly()
			return nil, fmt.Errorf("bridge: bind %s for the engine's KV events: %w", cfg.KVEventsListen, err)
		}
	} else if err := b.sub.Dial(cfg.KVEvents); err != nil {
		// Dial retries until runCtx ends, so this is a bad endpoint.
		b.closeEarly()
		return nil, fmt.Errorf("bridge: dial the engine's KV events at %s: %w", cfg.KVEvents, err)
	}
	b.scrape(runCtx) // a first load report and KV capacity for the registry
	if n := b.st.Load.TotalBlocks; n > 0 {
		b.mirror.Reserve(n) // 16 bytes × 8/7 a block of the engine's capacity
	}
	b.info = bus.WorkerInfo{ID: cfg.ID, Role: cfg.Role, Model: model, HTTPURL: cfg.EngineURL, BlockSize: cfg.BlockSize,
		KVBytesPerToken: cfg.KVBytesPerToken, KVBlocks: b.st.Load.TotalBlocks, KVEventsEnabled: true, Epoch: b.pub.Epoch(),
		MaxModelLen: maxLen, StartedUnixMilli: time.Now().UnixMilli(), Profile: bus.Profile{Model: model, KVBytesPerToken: cfg.KVBytesPerToken},
		APIs: cfg.APIs, Aliases: b.names.aliases, Adapters: b.names.adapters}
	if cfg.APIs == nil {
		b.info.APIs = b.probeAPIs(ctx)
	}
	if cfg.Profile.PeakFLOPS > 0 {
		b.info.Profile = cfg.Profile
		if cfg.KVBytesPerToken > 0 {
			b.info.Profile.KVBytesPerToken = cfg.KVBytesPerToken
		}
		if b.info.KVBytesPerToken == 0 {
			b.info.KVBytesPerToken = cfg.Profile.KVBytesPerToken
		}
	} else if cfg.Role != bus.RoleAggregated {
		log.Warn("no timing profile (give --gpu and a --model preset): the disaggregation gate cannot price remote prefill for this worker and keeps it local under auto")
	}
	if b.xfer != nil {
		b.info.KVXferAddr = b.xfer.Addr()
	}
	if cfg.Role == bus.RoleDecode && b.ln != nil {
		b.prob = &node.Prober{ID: cfg.ID, Key: cfg.WorkerKey, ClientTLS: cfg.KVXferClientTLS}
		b.info.ProbeURL = b.URL()
	}

	b.goRun("zmq receive", func() error { return b.receive(runCtx) })
	b.goRun("engine events", func() error { return b.process(runCtx) })
	b.goRun("kv events", func() error { return b.pub.Run(runCtx) })
	b.goRun("snapshots", func() error { return b.pub.ServeTieredSnapshots(runCtx, b.snapshot) })
	b.goRun("load reports", func() error {
		return bus.RunLoadReporter(runCtx, cfg.NC, cfg.Subjects, cfg.ScrapeEvery, func() bus.LoadReport { return b.scrape(runCtx) }, log)
	})
	if b.ln != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics{b})
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		if b.prob != nil {
			mux.HandleFunc("POST /kvxfer/probe", b.prob.Handler())
		}
		mux.HandleFunc("GET /health", func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Type", "application/json")
			s := b.Status()
			if !s.EngineUp {
				rw.WriteHeader(http.StatusServiceUnavailable)
			}
			_ = json.NewEncoder(rw).Encode(s)
		})
		b.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		b.goRun("http", func() error {
			if err := b.srv.Serve(b.ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	var ready func(*bus.Registry)
	if b.prob != nil {
		ready = b.prob.SetRegistry // probes dial only registered prefill workers' kvxfer addresses
	}
	g, err := bus.Join(ctx, runCtx, bus.RegistryConfig{NC: cfg.NC, Subjects: cfg.Subjects, TTL: cfg.RegistryTTL, Logger: log, ViaFrontend: cfg.RegistryViaFrontend}, b.info, ready)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("bridge: register %s: %w", cfg.ID, err)
	}
	b.errMu.Lock()
	b.reg = g
	b.errMu.Unlock()
	b.goRun("served names", func() error { return b.refreshNames(runCtx, cfg.NamesEvery) })
	return b, nil
}

func (b *Bridge) closeEarly() {
	b.cancel()
	b.sub.Close()
	if b.xfer != nil {
		b.xfer.Close()
	}
	if b.ln != nil {
		b.ln.Close()
	}
}

func (b *Bridge) goRun(what string, f func() error) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		if err := f(); err != nil {
			b.fail(fmt.Errorf("bridge %s: %s: %w", b.cfg.ID, what, err))
		}
	}()
}

func (b *Bridge) fail(err error) {
	b.errMu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.errMu.Unlock()
	b.stop()
}

func (b *Bridge) stop() { b.once.Do(func() { close(b.done); b.cancel() }) }

// Done is closed when the bridge stops, by Close or by a failure.
func (b *Bridge) Done() <-chan struct{} { return b.done }

// Err is the failure that stopped the bridge, if any.
func (b *Bridge) Err() error {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	return b.err
}

// Info is the registry entry.
func (b *Bridge) Info() bus.WorkerInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.info
}

// URL is the bridge's own HTTP base URL, or "".
func (b *Bridge) URL() string {
	if b.ln == nil {
		return ""
	}
	return "http://" + b.ln.Addr().String()
}

// drainPoll is how often a drain scrapes the engine for idleness: its
// metrics endpoint is cheap, and a quarter second is well below a
// request's length.
const drainPoll = 250 * time.Millisecond

// Drain marks the bridge's engine draining in the registry, so frontends
// route nothing new to it, and returns once the engine reports no request
// running or waiting, or after timeout; it reports whether the engine went
// idle. The engine itself keeps running: only its traffic from this
// deployment drains. Close the bridge after.
func (b *Bridge) Drain(ctx context.Context, timeout time.Duration) bool {
	b.errMu.Lock()
	reg := b.reg
	b.errMu.Unlock()
	// Kept in b.info, not a copy: the served-names refresh puts b.info
	// again when an adapter comes or goes, and must not undo the drain.
	b.mu.Lock()
	b.info.Draining = true
	info := b.info
	b.mu.Unlock()
	if reg != nil {
		uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := reg.Update(uctx, info); err != nil {
			b.log.Warn("drain: could not mark the engine draining in the registry; frontends learn when the bridge deregisters", "err", err)
		}
		cancel()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		// An engine whose metrics cannot be read is not taken for idle.
		if vals, _, _, err := b.metrics(ctx); err == nil {
			n := engineMetrics[b.cfg.Engine]
			if vals[n.running]+vals[n.waiting] == 0 {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-b.done:
			return false
		case <-tick.C:
		}
	}
}

// Close deregisters, stops every goroutine and closes the sockets; it
// returns the failure that stopped the bridge, if any.
func (b *Bridge) Close() error {
	b.errMu.Lock()
	reg := b.reg
	b.errMu.Unlock()
	if reg != nil {
		_ = reg.Close() // deletes the entry, so the frontend forgets the worker at once
	}
	b.stop()
	b.sub.Close()
	if b.srv != nil {
		b.srv.Close()
	}
	if b.xfer != nil {
		b.xfer.Close()
	}
	b.wg.Wait()
	return b.Err()
}

// Status returns a copy of what the bridge has seen.
func (b *Bridge) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.st
	s.MirrorBlocks = b.mirror.Len()
	s.Mirror = b.mirror.Stats()
	return s
}

// snapshot serves the frontend's snapshot requests from the mirror, under
// the lock the publisher's batches are sent under. While rebuilding it
// declines (calls nothing), which keeps the frontend resyncing.
func (b *Bridge) snapshot(fn func(t kvevents.Tier, hashes []uint64)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Now().Before(b.st.RebuildUntil) {
		return
	}
	b.mirror.Hashes(fn)
}
