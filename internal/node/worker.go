package node

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvxfer"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
	"github.com/switchyard-llm/switchyard/internal/vllmpub"
)

// WorkerConfig configures a worker node.
type WorkerConfig struct {
	Sim      sim.Config
	HTTPAddr string // listen address; "127.0.0.1:0" picks a free port

	// NC is the bus connection; nil runs the worker standalone (no
	// registration, events, or load reports).
	NC          *nats.Conn
	Subjects    bus.Subjects
	RegistryTTL time.Duration // 0: the bus default
	// RegistryViaFrontend: register through a frontend, never touching
	// JetStream (see bus.RegistryConfig.ViaFrontend). Set it when the
	// worker logs in to a server that holds workers to their permissions.
	RegistryViaFrontend bool
	KVEventsOff         bool // register with KV events disabled and publish none
	// EngineWire, if set, makes the simulator publish its KV events on ZMQ
	// as vLLM does (for a bridge) instead of on NATS; with NC nil it then
	// runs as a stand-alone engine.
	EngineWire *vllmpub.Config

	// KVXferAddr is where a prefill worker serves KV transfers; "" means the
	// HTTP listener's host on a free port.
	KVXferAddr      string
	KVXferServerTLS *tls.Config // nil: plain TCP
	KVXferClientTLS *tls.Config // used by a decode worker to pull and probe
	// LinkRate, if set, shapes what this worker's KV transfer server sends:
	// an in-process emulation of the prefill → decode link.
	LinkRate linkemu.Rate

	// WorkerKey, when set, is the bearer token the worker's /v1/* and its
	// admin and probe endpoints (POST /reset_prefix_cache, POST
	// /kvxfer/probe) require; without one /v1/* is open and the others
	// admit loopback clients only. The frontend sends it.
	WorkerKey string

	Logger *slog.Logger
}

// Worker is a running worker node.
type Worker struct {
	cfg   WorkerConfig
	sim   *sim.Worker
	srv   *http.Server
	xfer  *kvxfer.Server
	pub   *kvevents.Publisher
	wire  *vllmpub.Publisher // the simulator speaking vLLM's ZMQ wire, or nil
	regMu sync.Mutex         // guards reg: a failing goroutine may stop the worker while it registers
	// infoMu guards info once the worker runs: its adapters change.
	infoMu sync.Mutex
	reg    *bus.Registration
	// probe serves link probes and vets KV transfer addresses against
	// the registry, which it has only once registered (never standalone).
	probe  *Prober
	url    string
	info   bus.WorkerInfo
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}
	once   sync.Once
	errMu  sync.Mutex
	err    error

	// active counts /v1 requests being served, so a drain knows when the
	// worker is idle; draining refuses new ones (see Drain).
	active   atomic.Int64
	draining atomic.Bool
}

// TransferReport is what a decode worker publishes after each KV pull, so
// frontends can keep their link estimates current.
type TransferReport struct {
	From     string  `json:"from"` // prefill worker (engine) id
	To       string  `json:"to"`   // decode worker id
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	UnixNano int64   `json:"unix_nano"`
}

// StartWorker starts a worker node and returns once it serves HTTP and, if
// connected to the bus, is registered.
func StartWorker(ctx context.Context, cfg WorkerConfig) (*Worker, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("worker", cfg.Sim.ID)
	cfg.Sim.Logger = log
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("node: worker %s: listen on %s: %w (pick another --http-addr)", cfg.Sim.ID, cfg.HTTPAddr, err)
	}
	w := &Worker{cfg: cfg, done: make(chan struct{}), probe: &Prober{ID: cfg.Sim.ID, Key: cfg.WorkerKey, ClientTLS: cfg.KVXferClientTLS}}
	w.url = "http://" + ln.Addr().String()
	fail := func(err error) (*Worker, error) {
		ln.Close()
		if w.wire != nil {
			w.wire.Close()
		}
		if w.xfer != nil {
			w.xfer.Close()
		}
		return nil, err
	}

	simCfg := cfg.Sim
	bb, err := blockBytes(simCfg)
	if err != nil {
		return fail(err)
	}
	if simCfg.Role == bus.RolePrefill {
		addr := cfg.KVXferAddr
		if addr == "" {
			host, _, _ := net.SplitHostPort(ln.Addr().String())
			addr = net.JoinHostPort(host, "0")
		}
		xcfg := kvxfer.ServerConfig{Addr: addr, TLS: cfg.KVXferServerTLS, BlockBytes: bb, Logger: log, ProbeKey: cfg.WorkerKey}
		if cfg.LinkRate > 0 {
			xcfg.Shaper = linkemu.NewShaper(cfg.LinkRate.TCPGoodput(), 0)
		}
		if w.xfer, err = kvxfer.NewServer(xcfg); err != nil {
			return fail(err)
		}
		if err := w.xfer.Start(); err != nil {
			return fail(err)
		}
		simCfg.Leaser = w.xfer
		simCfg.KVXferAddr = w.xfer.Addr()
	}
	if cfg.EngineWire != nil {
		// The simulator plays a vLLM engine: events go out on ZMQ in
		// vLLM's wire for a bridge, never on NATS.
		wc := *cfg.EngineWire
		wc.BlockSize = simCfg.BlockSize
		if wc.BlockSize == 0 {
			wc.BlockSize = 16
		}
		wc.Logger = log
		if w.wire, err = vllmpub.New(wc); err != nil {
			return fail(err)
		}
		simCfg.Publisher = w.wire
	} else if cfg.NC != nil && !cfg.KVEventsOff {
		w.pub, err = kvevents.NewPublisher(kvevents.PublisherConfig{NC: cfg.NC, Subjects: cfg.Subjects, WorkerID: simCfg.ID, Logger: log})
		if err != nil {
			return fail(err)
		}
		simCfg.Publisher = w.pub
	}
	if simCfg.Role == bus.RoleDecode {
		puller, err := kvxfer.NewPuller(kvxfer.PullerConfig{
			TLS: cfg.KVXferClientTLS, BlockBytes: bb,
			OnTransfer: func(t kvxfer.Transfer) { w.reportTransfer(t) },
			Allow:      w.probe.Allow,
		})
		if err != nil {
			return fail(err)
		}
		simCfg.Puller = puller
	}
	simCfg.AdaptersChanged = w.adaptersChanged
	if w.sim, err = sim.NewWorker(simCfg); err != nil {
		return fail(err)
	}
	w.info = w.sim.Info()
	w.info.HTTPURL = w.url
	w.info.KVEventsEnabled = w.pub != nil
	w.info.StartedUnixMilli = time.Now().UnixMilli()
	if w.pub != nil {
		w.info.Epoch = w.pub.Epoch()
	}

	mux := http.NewServeMux()
	simHandler := w.sim.Handler()
	w.probe.BlockBytes = w.sim.BlockBytes()
	mux.HandleFunc("POST /kvxfer/probe", w.probe.Handler())
	mux.Handle("POST /reset_prefix_cache", w.keyed(simHandler.ServeHTTP))
	mux.Handle("/", simHandler)
	if cfg.WorkerKey != "" {
		// The frontend → worker hop: only the frontend, which holds the
		// key, may send requests. Without a key /v1 stays open (one host).
		mux.Handle("/v1/", w.keyed(simHandler.ServeHTTP))
	}
	w.srv = &http.Server{Handler: w.counted(mux), ReadHeaderTimeout: 10 * time.Second}

	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.goRun("engine", func() error { return w.sim.Run(runCtx) })
	w.goRun("http", func() error {
		if err := w.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	if cfg.NC != nil {
		if w.pub != nil {
			w.goRun("kv events", func() error { return w.pub.Run(runCtx) })
			w.goRun("snapshots", func() error { return w.pub.ServeTieredSnapshots(runCtx, w.sim.SnapshotTiers) })
		}
		w.goRun("load reports", func() error {
			return bus.RunLoadReporter(runCtx, cfg.NC, cfg.Subjects, 250*time.Millisecond, w.loadReport, log)
		})
		var ready func(*bus.Registry)
		if simCfg.Role == bus.RoleDecode {
			// The registry is the only source of addresses a decode
			// worker may dial for KV transfers and probes.
			ready = w.probe.SetRegistry
		}
		g, err := bus.Join(ctx, runCtx, bus.RegistryConfig{NC: cfg.NC, Subjects: cfg.Subjects, TTL: cfg.RegistryTTL, Logger: log, ViaFrontend: cfg.RegistryViaFrontend}, w.info, ready)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("node: worker %s: register: %w", simCfg.ID, err)
		}
		w.regMu.Lock()
		w.reg = g
		w.regMu.Unlock()
	}
	return w, nil
}

// blockBytes is the payload size of one KV block of the configured model.
func blockBytes(c sim.Config) (int, error) {
	name, bs := c.Model, c.BlockSize
	if name == "" {
		name = "qwen3-0.6b"
	}
	if bs == 0 {
		bs = 16
	}
	m, err := perfmodel.LookupModel(name)
	if err != nil {
		return 0, fmt.Errorf("node: %w", err)
	}
	return bs * m.KVBytesPerToken(), nil
}

func (w *Worker) goRun(what string, f func() error) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := f(); err != nil {
			w.errMu.Lock()
			if w.err == nil {
				w.err = fmt.Errorf("node: worker %s: %s: %w", w.cfg.Sim.ID, what, err)
			}
			w.errMu.Unlock()
			w.stop()
		}
	}()
}

func (w *Worker) loadReport() bus.LoadReport {
	l := w.sim.Load()
	return bus.LoadReport{
		WorkerID: w.cfg.Sim.ID, Running: l.Running, Waiting: l.Waiting,
		QueuedPrefillTokens: l.QueuedPrefillTokens, ActiveDecodeBlocks: l.ActiveDecodeBlocks,
		KVUsage: l.KVUsage, UsedBlocks: l.UsedBlocks, TotalBlocks: l.TotalBlocks, UnixNano: time.Now().UnixNano(),
		LoRA: w.sim.LoRAState(),
	}
}

func (w *Worker) reportTransfer(t kvxfer.Transfer) {
	if w.cfg.NC == nil {
		return
	}
	b, _ := json.Marshal(TransferReport{From: t.FromEngine, To: w.cfg.Sim.ID, Bytes: t.Bytes, Seconds: t.Duration.Seconds(), UnixNano: time.Now().UnixNano()})
	_ = w.cfg.NC.Publish(w.cfg.Subjects.Transfers(w.cfg.Sim.ID), b)
}

// ProbeRequest asks a worker to measure the link from a KV transfer server
// to itself.
type ProbeRequest struct {
	// EngineID is the prefill worker whose kvxfer server is at Addr; the
	// decode worker checks the pair against the registry before dialling.
	EngineID string `json:"engine_id"`
	Addr     string `json:"addr"`
	Bytes    int64  `json:"bytes"`
}

// ProbeResponse is the measured link.
type ProbeResponse struct {
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	RTTMillis   float64 `json:"rtt_ms"`
}

// keyed guards an admin or probe endpoint: with a WorkerKey, it requires
// "Authorization: Bearer <key>" (scheme case-insensitive, RFC 7235); without
// one, a loopback client.
func (w *Worker) keyed(h http.HandlerFunc) http.HandlerFunc {
	return keyed(w.cfg.Sim.ID, w.cfg.WorkerKey, h)
}

func keyed(id, key string, h http.HandlerFunc) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		if !workerAuthorized(r, key) {
			msg := "worker " + id + ": this endpoint needs Authorization: Bearer <worker key> (the frontend's --worker-key)"
			if key == "" {
				msg = "worker " + id + ": this endpoint admits loopback clients only; set --worker-key on the worker and the frontend"
			}
			openai.WriteError(rw, http.StatusUnauthorized, openai.TypeAuthentication, "", msg)
			return
		}
		h(rw, r)
	}
}

func workerAuthorized(r *http.Request, key string) bool {
	if key == "" {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		ip := net.ParseIP(host)
		return err == nil && ip != nil && ip.IsLoopback()
	}
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(key)) == 1
}

// URL is the worker's HTTP base URL.
func (w *Worker) URL() string { return w.url }

// ID is the worker id.
func (w *Worker) ID() string { return w.cfg.Sim.ID }

// Info is the worker's registry entry.
func (w *Worker) Info() bus.WorkerInfo {
	w.infoMu.Lock()
	defer w.infoMu.Unlock()
	return w.info
}

// adaptersChanged puts the registry entry again with the LoRA adapters the
// engine serves now (loaded or unloaded at run time).
func (w *Worker) adaptersChanged(adapters []bus.Adapter) {
	w.infoMu.Lock()
	w.info.Adapters = adapters
	info := w.info
	w.infoMu.Unlock()
	w.regMu.Lock()
	g := w.reg
	w.regMu.Unlock()
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := g.Update(ctx, info); err != nil {
		w.cfg.Logger.Warn("registry update after a LoRA adapter change failed; the next refresh puts it", "worker", w.cfg.Sim.ID, "err", err)
	}
}

// Wire is the vLLM-wire publisher, or nil.
func (w *Worker) Wire() *vllmpub.Publisher { return w.wire }

// Sim is the simulated engine.
func (w *Worker) Sim() *sim.Worker { return w.sim }

// Done is closed when the worker stops, by Close or by a failure.
func (w *Worker) Done() <-chan struct{} { return w.done }

// Err is the failure that stopped the worker, if any.
func (w *Worker) Err() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

func (w *Worker) stop() {
	w.once.Do(func() {
		w.regMu.Lock()
		g := w.reg
		w.regMu.Unlock()
		if g != nil {
			_ = g.Close() // deregister first, so no new requests arrive
		}
		w.cancel() // the engine stops, ending streaming handlers
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = w.srv.Shutdown(shut)
		cancel()
		if w.xfer != nil {
			_ = w.xfer.Close()
		}
		go func() {
			w.wg.Wait()
			if w.wire != nil {
				_ = w.wire.Close()
			}
			close(w.done)
		}()
	})
}

// counted counts the /v1 requests h serves and, once the worker drains,
// refuses new ones with 503: a frontend that routed one before it heard
// of the drain retries it on another worker (a 5xx before any byte is
// retried), so nothing new starts here.
func (w *Worker) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/") || r.Method != http.MethodPost {
			h.ServeHTTP(rw, r)
			return
		}
		w.active.Add(1)
		defer w.active.Add(-1)
		if w.draining.Load() {
			rw.Header().Set("Retry-After", "1")
			openai.WriteError(rw, http.StatusServiceUnavailable, openai.TypeUnavailable, "",
				"node: worker "+w.cfg.Sim.ID+" is draining: it takes no new requests; send it to another worker")
			return
		}
		h.ServeHTTP(rw, r)
	})
}

// drainPoll is how often a drain looks for the worker to be idle: a
// fraction of a typical request, so it exits soon after the last one.
const drainPoll = 20 * time.Millisecond

// Drain shuts the worker down gracefully: it marks itself draining in
// the registry, so every frontend stops routing new requests to it at
// once, refuses any that still arrive, and returns when the requests it
// was serving are done or when timeout has passed, whichever comes
// first. It reports how many were still running then. Close it after.
func (w *Worker) Drain(ctx context.Context, timeout time.Duration) int {
	w.draining.Store(true)
	w.regMu.Lock()
	g := w.reg
	w.regMu.Unlock()
	if g != nil {
		w.infoMu.Lock()
		w.info.Draining = true // kept by any later update of the entry
		info := w.info
		w.infoMu.Unlock()
		uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := g.Update(uctx, info); err != nil {
			w.cfg.Logger.Warn("drain: could not mark the worker draining in the registry; frontends learn when it deregisters", "worker", w.cfg.Sim.ID, "err", err)
		}
		cancel()
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		// A refused request counts for an instant too; it is not waited on
		// beyond that.
		if n := w.active.Load(); n == 0 {
			return 0
		}
		select {
		case <-deadline.C:
			return int(w.active.Load())
		case <-ctx.Done():
			return int(w.active.Load())
		case <-w.done:
			return int(w.active.Load())
		case <-tick.C:
		}
	}
}

// Close stops the worker and waits for it.
func (w *Worker) Close() error {
	w.stop()
	<-w.done
	return w.Err()
}
