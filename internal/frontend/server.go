package frontend

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard-llm/switchyard/internal/admit"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/prom"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
	"github.com/switchyard-llm/switchyard/internal/upstream"
)

// Response headers the frontend sets.
const (
	HeaderWorker        = "x-switchyard-worker"
	HeaderOverlapTokens = "x-switchyard-overlap-tokens"
	// HeaderOverlapSource is "index" (KV events) or "approx" (the router's
	// own recent decisions, for a worker whose events are not healthy).
	HeaderOverlapSource = "x-switchyard-overlap-source"
	// HeaderOverlapTiers splits the overlap tokens by the tier they sit in
	// on the chosen worker: "gpu=N,cpu=N,disk=N".
	HeaderOverlapTiers  = "x-switchyard-overlap-tiers"
	HeaderPolicy        = "x-switchyard-policy"
	HeaderPrefill       = "x-switchyard-prefill"
	HeaderDisaggReason  = "x-switchyard-disagg-reason"
	HeaderPredictedTTFT = "x-switchyard-predicted-ttft-ms"
	// HeaderKVBytes is the KV bytes the decode worker pulled for a remote
	// prefill, as it measured them (0 for a local prefill; absent when the
	// worker does not report its pulls). HeaderKVPullMS is how long the
	// pull took; HeaderKVBytesPredicted is the gate's prediction.
	HeaderKVBytes          = "x-switchyard-kv-bytes"
	HeaderKVPullMS         = "x-switchyard-kv-pull-ms"
	HeaderKVBytesPredicted = "x-switchyard-kv-bytes-predicted"
	HeaderDisaggMode       = "x-switchyard-disagg-mode"
	// HeaderPinWorker, on a request with admin access, bypasses the router.
	HeaderPinWorker = "x-switchyard-pin-worker"
	headerRequestID = "x-request-id"
)

// maxRequestIDLen bounds a client's x-request-id that the frontend adopts:
// it is echoed, logged and forwarded, so an oversized one is replaced.
const maxRequestIDLen = 128

// Server is the frontend. Build it with New.
type Server struct {
	cfg          Config
	deps         Deps
	tok          Tokenizer
	m            *metrics
	log          *slog.Logger
	client       *http.Client
	lean         *upstream.Client // completions to plain http workers (relay.go)
	workerBearer string           // "Bearer <worker key>", for both clients
	transport    *http.Transport
	mux          *http.ServeMux
	handler      http.Handler      // mux behind openai.Mux and serveHTTP
	endpoints    map[string]string // mux pattern → endpoint label; read-only after New
	started      time.Time
	reqPrefix    string
	reqSeq       atomic.Uint64

	// mode is the disaggregation mode in force (a string), switched at run
	// time by PUT /admin/disagg.
	mode atomic.Value

	// inflight holds each worker's state (values are *workerState): requests
	// in flight, outlier ejection; sync.Map because the key set is stable
	// and read-mostly.
	inflight sync.Map

	// known holds every model name a worker has served (values are
	// modelRoute), so a model whose workers all left is 503, not 404.
	known sync.Map
	adm   *admit.Controller // admission and the fair queue

	draining atomic.Bool  // SetDraining: refuse new completions, /health 503
	serving  atomic.Int64 // completion requests in the handler, for a drain

	conns  atomic.Int64 // open client connections, through Listener
	active atomic.Int64 // completion requests being served, for MaxInflight

	affinity *affinity // stored response id → worker, for previous_response_id

	// blindGrace is agreeBlindGrace; tests that judge synchronously set 0.
	// afterFunc is time.AfterFunc, replaced by tests that fire it.
	blindGrace time.Duration
	afterFunc  func(time.Duration, func())

	closing   chan struct{} // closed by Close: stops ejection probes
	closeOnce sync.Once
	probeWG   sync.WaitGroup
}

// New validates cfg and builds a Server.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if deps.Workers == nil || deps.Router == nil {
		return nil, fmt.Errorf("frontend: deps: Workers and Router are required")
	}
	s := &Server{cfg: cfg, deps: deps, log: cfg.Logger, started: time.Now(), closing: make(chan struct{}), affinity: newAffinity(maxAffinity), blindGrace: agreeBlindGrace,
		afterFunc: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
	s.mode.Store(cfg.DisaggMode)
	s.tok = deps.Tokenizer
	if s.tok == nil {
		t, err := tokenizer.NewCl100k()
		if err != nil {
			return nil, fmt.Errorf("frontend: %w", err)
		}
		s.tok = t
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	s.m = m
	if s.adm, err = admit.New(admit.Config{Capacity: s.capacity, Serving: s.anyServing, MaxQueue: cfg.MaxQueue, QueueTimeout: cfg.QueueTimeout,
		Tenants: cfg.Tenants, Registry: cfg.Registry}); err != nil {
		return nil, fmt.Errorf("frontend: %w", err)
	}
	open := prom.GaugeFunc("switchyard_client_connections",
		"Client connections open through the frontend's listener.", func() float64 { return float64(s.conns.Load()) })
	if err := prom.Register(cfg.Registry, "frontend", open); err != nil {
		return nil, err
	}
	if c, ok := s.tok.(interface{ CacheStats() tokenizer.CacheStats }); ok {
		if err := prom.Register(cfg.Registry, "frontend", tokenizerCacheMetrics(c.CacheStats)...); err != nil {
			return nil, err
		}
	}
	s.reqPrefix = "sy-" + strconv.FormatInt(s.started.UnixNano()%1e12, 36) + "-"
	// Both clients to workers dial alike: net/http's for https workers and
	// admin calls, the lean one for completions to plain http workers.
	dial := (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	s.workerBearer = "Bearer " + cfg.WorkerKey
	s.transport = &http.Transport{
		Proxy:       nil,
		DialContext: dial,
		// No ResponseHeaderTimeout: a non-streaming worker answers only when
		// generation is done, so forward bounds the header wait per request.
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256, // one frontend fans many concurrent streams into few workers
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // relay bytes as the worker wrote them
	}
	s.client = &http.Client{Transport: s.transport}
	s.lean = &upstream.Client{Dial: dial, MaxIdlePerHost: 256, IdleTimeout: 90 * time.Second}
	if cfg.WorkerKey != "" {
		s.client.Transport = workerAuth{key: s.workerBearer, next: s.transport}
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleCompletion(endpointChat))
	s.mux.HandleFunc("POST /v1/completions", s.handleCompletion(endpointCompletions))
	s.mux.HandleFunc("POST /v1/messages", s.handleAPI(endpointMessages))
	s.mux.HandleFunc("POST /v1/responses", s.handleAPI(endpointResponses))
	s.mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	s.mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	s.mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	s.mux.HandleFunc("GET /v1/models", s.handleModels)
	s.mux.HandleFunc("GET /v1/models/{id...}", s.handleModel)
	s.mux.HandleFunc("POST /tokenize", s.handleTokenize)
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{Registry: cfg.Registry}))
	s.mux.HandleFunc("GET /admin/router", s.admin(s.handleGetRouter))
	s.mux.HandleFunc("PUT /admin/router", s.admin(s.handlePutRouter))
	s.mux.HandleFunc("POST /admin/reset-cache", s.admin(s.handleResetCache))
	s.mux.HandleFunc("GET /admin/events", s.admin(s.handleEvents))
	s.mux.HandleFunc("POST /admin/lookup", s.admin(s.handleLookup))
	s.mux.HandleFunc("GET /admin/links", s.admin(s.handleLinks))
	s.mux.HandleFunc("POST /admin/links/probe", s.admin(s.handleProbe))
	s.mux.HandleFunc("GET /admin/disagg", s.admin(s.handleGetDisagg))
	s.mux.HandleFunc("PUT /admin/disagg", s.admin(s.handlePutDisagg))
	s.mux.HandleFunc("POST /admin/disagg/predict", s.admin(s.handlePredict))
	s.mux.HandleFunc("GET /admin/cluster", s.admin(s.handleCluster))
	s.mux.HandleFunc("GET /ui", s.handleUI)
	if cfg.Pprof {
		// Profiles expose internals and cost CPU: admin only.
		s.mux.HandleFunc("GET /debug/pprof/", s.admin(pprof.Index))
		s.mux.HandleFunc("GET /debug/pprof/cmdline", s.admin(pprof.Cmdline))
		s.mux.HandleFunc("GET /debug/pprof/profile", s.admin(pprof.Profile))
		s.mux.HandleFunc("GET /debug/pprof/symbol", s.admin(pprof.Symbol))
		s.mux.HandleFunc("GET /debug/pprof/trace", s.admin(pprof.Trace))
	}
	s.endpoints = map[string]string{
		"POST /v1/chat/completions": endpointChat.name,
		"POST /v1/completions":      endpointCompletions.name,
		"POST /v1/messages":         endpointMessages.name,
		"POST /v1/responses":        endpointResponses.name,
		"POST /v1/embeddings":       endpointEmbeddings.name,
	}
	s.handler = openai.Mux(s.mux)
	return s, nil
}

// Header keys canonicalised once, for the hot path: http.Header.Get
// canonicalises (and, for a lower-case name, allocates) on every call.
var (
	canonRequestID = http.CanonicalHeaderKey(headerRequestID)
	canonPin       = http.CanonicalHeaderKey(HeaderPinWorker)
	canonPriority  = http.CanonicalHeaderKey(HeaderPriority)
	canonAPIKey    = http.CanonicalHeaderKey("x-api-key")
)

// first is h.Get for a key already canonical.
func first(h http.Header, canon string) string {
	if v := h[canon]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// ServeHTTP serves every endpoint. Every response carries x-request-id:
// the client's, if it sent a usable one, else a new one; the id is set on
// the response before any route runs, and handlers read it from there.
// Unknown paths and methods get OpenAI error envelopes (404, 405).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// The canonical key, used directly: Get and Set would canonicalise the
	// lower-case constant, allocating, on every request.
	var id string
	if v := r.Header[canonRequestID]; len(v) > 0 {
		id = v[0]
	}
	if !usableRequestID(id) {
		id = s.newRequestID()
	}
	w.Header()[canonRequestID] = []string{id}
	defer func() { s.m.duration.WithLabelValues(s.endpointLabel(r)).Observe(time.Since(start).Seconds()) }()
	s.handler.ServeHTTP(w, r)
}

// endpointLabel names r's endpoint for metrics from the bounded set of
// served patterns.
func (s *Server) endpointLabel(r *http.Request) string {
	p := r.Pattern
	if p == "" {
		return "unmatched"
	}
	if l, ok := s.endpoints[p]; ok {
		return l
	}
	_, path, _ := strings.Cut(p, " ")
	return path
}

// usableRequestID reports whether a client's request id can be adopted:
// not empty, not oversized, printable ASCII without spaces.
func usableRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// DisaggMode returns the disaggregation mode in force.
func (s *Server) DisaggMode() string { return s.mode.Load().(string) }

// SetDisaggMode switches the disaggregation mode for subsequent requests.
func (s *Server) SetDisaggMode(mode string) error {
	switch mode {
	case DisaggNever, DisaggAlways, DisaggAuto:
		s.mode.Store(mode)
		return nil
	}
	return fmt.Errorf("frontend: disagg mode %q: want never, always or auto", mode)
}

// Handler returns the HTTP handler serving every endpoint: s itself.
func (s *Server) Handler() http.Handler { return s }

// Close stops ejection probes and releases idle connections to workers.
// In-flight requests are not interrupted; shut the http.Server down first.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
	s.probeWG.Wait()
	s.transport.CloseIdleConnections()
	s.lean.Close()
}

func (s *Server) newRequestID() string {
	return s.reqPrefix + strconv.FormatUint(s.reqSeq.Add(1), 10)
}

// bearer reports whether r carries "Authorization: Bearer key". The scheme
// is matched case-insensitively, as RFC 7235 §2.1 requires; the token is
// compared in constant time.
func bearer(r *http.Request, key string) bool {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(key)) == 1
}

// apiKeyHeader reports whether r carries "x-api-key: key", as Anthropic's
// clients send it, compared in constant time.
func apiKeyHeader(r *http.Request, key string) bool {
	h := first(r.Header, canonAPIKey)
	return h != "" && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(h)), []byte(key)) == 1
}

// apiAuthorized applies the /v1 rule: open when no keys are set, else the
// API key or the admin key.
func (s *Server) apiAuthorized(r *http.Request) bool {
	if s.cfg.APIKey == "" {
		return true
	}
	if bearer(r, s.cfg.APIKey) || apiKeyHeader(r, s.cfg.APIKey) {
		return true
	}
	return s.cfg.AdminKey != "" && bearer(r, s.cfg.AdminKey)
}

// adminAuthorized applies the admin rule documented in the package comment:
// the admin key when one is set, else loopback clients only. The API key is
// never an admin key: a client allowed to generate must not be able to
// switch the router or read worker addresses.
func (s *Server) adminAuthorized(r *http.Request) bool {
	if s.cfg.AdminKey != "" {
		return bearer(r, s.cfg.AdminKey)
	}
	return loopbackClient(r)
}

// loopbackClient reports whether r comes from a loopback address.
func loopbackClient(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.adminAuthorized(r) {
			s.m.errors.WithLabelValues(errKindUnauthorized).Inc()
			openai.WriteError(w, http.StatusUnauthorized, openai.TypeAuthentication, "",
				"frontend: admin endpoints need Authorization: Bearer <admin key> (set --admin-key; without one, only loopback clients are admitted)")
			return
		}
		h(w, r)
	}
}

// statusWriter records the status code for metrics and keeps Flush.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// bodyEnder is a writer that can send the end of its answer before the
// handler returns: internal/h1's, through statusWriter.
type bodyEnder interface{ EndBody() error }

// EndBody ends the answer now if the server can (internal/h1), and
// otherwise flushes what was written.
func (w *statusWriter) EndBody() error {
	if e, ok := w.ResponseWriter.(bodyEnder); ok {
		return e.EndBody()
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// workerAuth presents the worker key on every request the frontend sends to a
// worker (completions, prefills, liveness checks, cache resets), so a
// keyed worker admits the frontend and no one else. It clones a request
// only to add the header, as a RoundTripper may not change its input.
type workerAuth struct {
	key  string // "Bearer <worker key>"
	next http.RoundTripper
}

func (b workerAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.key)
	return b.next.RoundTrip(r)
}
