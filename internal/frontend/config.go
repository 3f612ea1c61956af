package frontend

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/admit"
)

// Disaggregation modes.
const (
	DisaggNever  = "never"
	DisaggAlways = "always"
	DisaggAuto   = "auto"
)

// Config configures a Server. Zero durations and sizes take the defaults
// documented on each field.
type Config struct {
	// Model is the served model name; "" serves every model a worker
	// registers (a fleet).
	Model     string
	BlockSize int // KV block size in tokens; default 16
	// BlockSizes overrides BlockSize for the workers of a model, by model.
	BlockSizes map[string]int
	// ModelDisagg overrides the disaggregation mode for a model's
	// requests, by model: never, always or auto. PUT /admin/disagg
	// switches the mode of the models not named.
	ModelDisagg map[string]string

	APIKey   string // if set, /v1/* requires it as a bearer token
	AdminKey string // admin bearer token; see the package doc for fallbacks
	// WorkerKey is sent as a bearer token on every call the frontend makes
	// to workers: /v1 requests and admin endpoints (POST /reset_prefix_cache).
	WorkerKey string

	MaxBodyBytes int64 // request body limit; default 8 MiB

	ConnectTimeout time.Duration // dial to a worker; default 2 s
	// HeaderTimeout bounds a streaming request's wait for the worker's
	// response headers. A non-streaming worker sends headers only when
	// generation is done, so a non-streaming request's wait is bounded by
	// RequestTimeout alone. Default 60 s.
	HeaderTimeout time.Duration
	IdleTimeout   time.Duration // longest gap between body chunks; default 30 s
	// RequestTimeout bounds the whole upstream exchange, remote prefill
	// included, and so a non-streaming generation. Default 10 min.
	RequestTimeout time.Duration

	// ClientReadTimeout bounds reading a request's body. Default 30 s.
	ClientReadTimeout time.Duration
	// ClientStallTimeout bounds each write to a client: a client that
	// stops reading its stream (its TCP window stays shut) for this long is
	// cut off and the upstream request cancelled, freeing the worker.
	// Default 30 s.
	ClientStallTimeout time.Duration

	// MaxConnections bounds open client connections (see Server.Listener).
	// Default 4096.
	MaxConnections int
	// MaxInflight bounds completion requests served at once, counted from
	// when the body has been read; one beyond it gets 429 with Retry-After. MaxInflightPerWorker bounds the requests
	// this frontend has open on one worker: a full worker is not a
	// candidate, and when every candidate is full the request gets 429.
	// Zero means no bound. The per-worker bound is checked before the
	// request is counted, so a burst may overshoot it by a few.
	MaxInflight          int
	MaxInflightPerWorker int
	// Admission: when every candidate worker is at MaxInflightPerWorker a
	// request queues (see package admit), up to MaxQueue requests
	// (default 1024) for QueueTimeout at most (default 30 s). Tenants,
	// if set, name each request's tenant by its API key (see tenantOf).
	MaxQueue     int
	QueueTimeout time.Duration
	Tenants      *admit.Tenants
	// QueueTTFT, when set, also counts a worker full while its predicted
	// prefill queue (Deps.Queue) exceeds it, so requests wait in the fair
	// queue rather than in one engine's FIFO past the TTFT objective.
	QueueTTFT time.Duration
	// Pprof serves net/http/pprof under /debug/pprof/, behind the admin key.
	Pprof bool

	// EjectAfter is how many consecutive connect failures eject a worker
	// from routing; one timeout ejects it at once. Default 2.
	EjectAfter int
	// EjectProbeEvery is the wait before the first health probe of an
	// ejected worker; later probes back off to 8 times it. Default 1 s.
	EjectProbeEvery time.Duration
	// SuspectAfter is how long a request waits for a worker's response
	// headers before the worker's health is checked (GET /health within
	// SuspectCheckTimeout, one check shared by every request waiting on
	// it). A worker that fails it is frozen or gone: it is ejected and the
	// request retried elsewhere, so a frozen worker gets no new request
	// about SuspectAfter+SuspectCheckTimeout after the first one it left
	// unanswered, however long HeaderTimeout is. Defaults 1 s and 1 s.
	SuspectAfter        time.Duration
	SuspectCheckTimeout time.Duration

	// DisaggMode is the initial disaggregation mode: never, always or auto
	// (default); always and auto both ask the gate, passing the mode in
	// GateInput. PUT /admin/disagg and Server.SetDisaggMode switch it.
	DisaggMode string

	// SettingsChanged, when set, is called after PUT /admin/router or PUT
	// /admin/disagg changed a setting, so frontend replicas can share it.
	SettingsChanged func()

	Registry *prometheus.Registry // where the frontend registers its metrics; nil: a private one
	Logger   *slog.Logger         // nil: slog.Default()
}

func (c *Config) setDefaults() error {
	for m, mode := range c.ModelDisagg {
		if mode != DisaggNever && mode != DisaggAlways && mode != DisaggAuto {
			return fmt.Errorf("frontend: config: model %q: disagg mode %q: want never, always or auto", m, mode)
		}
	}
	for m, bs := range c.BlockSizes {
		if bs <= 0 {
			return fmt.Errorf("frontend: config: model %q: block size %d must be positive", m, bs)
		}
	}
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.BlockSize < 0 {
		return fmt.Errorf("frontend: config: block size %d must be positive", c.BlockSize)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 8 << 20
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 2 * time.Second
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = 60 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Minute
	}
	if c.ClientReadTimeout == 0 {
		c.ClientReadTimeout = 30 * time.Second
	}
	if c.ClientStallTimeout == 0 {
		c.ClientStallTimeout = 30 * time.Second
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = 4096
	}
	if c.MaxConnections < 0 || c.MaxInflight < 0 || c.MaxInflightPerWorker < 0 || c.ClientReadTimeout < 0 || c.ClientStallTimeout < 0 {
		return fmt.Errorf("frontend: config: connection, in-flight and client limits must not be negative")
	}
	if c.EjectAfter == 0 {
		c.EjectAfter = 2
	}
	if c.EjectProbeEvery == 0 {
		c.EjectProbeEvery = time.Second
	}
	if c.SuspectAfter == 0 {
		c.SuspectAfter = time.Second
	}
	if c.SuspectCheckTimeout == 0 {
		c.SuspectCheckTimeout = time.Second
	}
	if c.EjectAfter < 0 || c.EjectProbeEvery < 0 {
		return fmt.Errorf("frontend: config: eject after %d failures, probe every %v: both must be positive", c.EjectAfter, c.EjectProbeEvery)
	}
	switch c.DisaggMode {
	case "":
		c.DisaggMode = DisaggAuto
	case DisaggNever, DisaggAlways, DisaggAuto:
	default:
		return fmt.Errorf("frontend: config: disagg mode %q: want never, always or auto", c.DisaggMode)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}
