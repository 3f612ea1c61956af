package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/admit"
	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/gate"
	"github.com/switchyard-llm/switchyard/internal/kvxfer"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
	"github.com/switchyard-llm/switchyard/internal/node"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
	"github.com/switchyard-llm/switchyard/internal/router"
)

// engineFlags adds the simulated engine's settings to fs.
func engineFlags(fs *flag.FlagSet, c *sim.Config) {
	fs.StringVar(&c.Model, "model", "qwen3-0.6b", "model preset: qwen3-0.6b, llama-3.1-8b, qwen3-32b, llama-3.1-70b, llama-2-70b")
	fs.StringVar(&c.GPU, "gpu", "rtx-4060", "GPU preset: rtx-4060, l4, a100-80g, h100, h200")
	fs.IntVar(&c.TP, "tp", 0, "tensor parallelism (0: smallest that fits the weights)")
	fs.IntVar(&c.BlockSize, "block-size", 16, "tokens per KV block")
	fs.IntVar(&c.KVBlocks, "kv-blocks", 0, "KV blocks per worker (0: from GPU memory)")
	fs.Float64Var(&c.GPUMemoryUtilization, "gpu-memory-utilization", 0.9, "share of GPU memory for weights and KV cache")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", 8192, "token budget per scheduler step")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", 256, "running sequences at most")
	fs.Float64Var(&c.Speedup, "speedup", 1, "simulated seconds per wall-clock second")
	fs.Int64Var(&c.Seed, "seed", 0, "generation seed for requests that carry none")
	fs.Float64Var(&c.KVOffloadGiB, "kv-offload-gib", 0, "host-memory KV tier per worker, GiB: evicted GPU blocks are offloaded there and loaded back over the host link (0: none)")
	fs.Float64Var(&c.KVDiskGiB, "kv-disk-gib", 0, "disk KV tier per worker below host memory, GiB (needs --kv-offload-gib; 0: none)")
}

// busFlags are the settings every process on the bus shares.
type busFlags struct {
	nats        string
	namespace   string
	registryTTL time.Duration
	login       natsAuthFlags
	insecure    bool
}

func (b *busFlags) add(fs *flag.FlagSet, natsHelp string) {
	fs.StringVar(&b.nats, "nats", "", natsHelp)
	fs.StringVar(&b.namespace, "namespace", "default", "namespace of this deployment's subjects, so deployments can share one NATS")
	fs.DurationVar(&b.registryTTL, "registry-ttl", 6*time.Second, "a worker that stops heartbeating leaves routing within this time")
	fs.BoolVar(&b.insecure, "nats-insecure", false, "run on a --nats server that lets clients in without credentials (anyone who reaches it can register a worker and receive prompts); warns every minute")
}

// insecureWarnEvery paces the reminder that the bus admits anyone.
const insecureWarnEvery = time.Minute

// guardBus refuses an external NATS server that admits clients without
// credentials, unless --nats-insecure: on such a bus anyone who can reach
// it can register a worker and be sent prompts. With --nats-insecure it
// warns now and every insecureWarnEvery until ctx ends. A server that
// checks client certificates (--nats-cert) counts as authenticating.
func (b *busFlags) guardBus(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
	if nc.AuthRequired() || b.login.certFile != "" && nc.TLSRequired() {
		return nil
	}
	if !b.insecure {
		return fmt.Errorf("the NATS server at %s lets clients in without credentials: anyone who reaches it can register a worker and receive prompts; "+
			"give it logins (switchyard nats-config prints them) and this process its own (--nats-user and --nats-password-file, --nats-creds or --nats-nkey), "+
			"or pass --nats-insecure to run on it anyway", bus.RedactURL(b.nats))
	}
	go warnEvery(ctx, log, insecureWarnEvery, "the NATS bus lets clients in without credentials (--nats-insecure): anyone who reaches it can register a worker and receive prompts",
		"nats", bus.RedactURL(b.nats))
	return nil
}

// warnEvery logs msg at WARN now and every every until ctx ends.
func warnEvery(ctx context.Context, log *slog.Logger, every time.Duration, msg string, args ...any) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		log.Warn(msg, args...)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check rejects settings the bus would silently replace with defaults.
func (b *busFlags) check() error {
	if b.registryTTL <= 0 {
		return fmt.Errorf("--registry-ttl %v: want more than 0, e.g. 6s", b.registryTTL)
	}
	return nil
}

// tlsFlags name kvxfer's TLS files.
func tlsFlags(fs *flag.FlagSet, f *kvxfer.TLSFiles) {
	fs.StringVar(&f.CertFile, "kvxfer-tls-cert", "", "PEM certificate for KV transfer TLS")
	fs.StringVar(&f.KeyFile, "kvxfer-tls-key", "", "PEM key for KV transfer TLS")
	fs.StringVar(&f.CAFile, "kvxfer-tls-ca", "", "PEM CA: servers require client certificates from it (mutual TLS); clients trust it")
}

// applyTLS fills the worker's kvxfer TLS settings from files.
func applyTLS(f kvxfer.TLSFiles, w *node.WorkerConfig) error {
	if !f.Enabled() {
		return nil
	}
	var err error
	if f.CertFile != "" {
		if w.KVXferServerTLS, err = f.ServerConfig(); err != nil {
			return err
		}
	}
	w.KVXferClientTLS, err = f.ClientConfig()
	return err
}

// parseLinkRate parses --link-rate; "" means no emulation.
func parseLinkRate(s string) (linkemu.Rate, error) {
	if s == "" {
		return 0, nil
	}
	r, err := linkemu.ParseRate(s)
	if err != nil {
		return 0, fmt.Errorf("--link-rate %q: %w (examples: 1gbit, 10gbit, 125MB/s)", s, err)
	}
	return r, nil
}

// frontendFlags adds the frontend's settings to fs.
func frontendFlags(fs *flag.FlagSet, c *node.FrontendConfig) {
	fs.StringVar(&c.Policy, "router", "kv", "routing policy: kv, round-robin, random, least-loaded")
	fs.Float64Var(&c.Alpha, "router-alpha", 1, "kv policy: weight of prefill blocks against decode blocks")
	fs.BoolVar(&c.TierBlind, "router-tier-blind", false, "kv policy: count blocks a worker holds only in host memory or on disk as misses (default: price them by the prefill time loading them saves)")
	fs.StringVar(&c.Disagg, "disagg", "auto", "disaggregated prefill: never, always, auto (remote only when the measured link makes it pay)")
	fs.Float64Var(&c.Margin, "disagg-margin", 0.1, "auto: remote prefill must be predicted this fraction faster than local")
	fs.DurationVar(&c.TTFTSLO, "ttft-slo", 2*time.Second, "time-to-first-token target (disaggregation gate)")
	fs.DurationVar(&c.ITLSLO, "itl-slo", 100*time.Millisecond, "inter-token latency target (disaggregation gate)")
	fs.StringVar(&c.APIKey, "api-key", "", "require this bearer token on /v1/* (default: $"+envAPIKey+"; prefer the variable: a flag shows in ps)")
	fs.StringVar(&c.AdminKey, "admin-key", "", "bearer token for /admin/* and /health's worker addresses (default: $"+envAdminKey+"; without one, admin is loopback-only: the API key never grants it)")
	fs.StringVar(&c.WorkerKey, "worker-key", "", "bearer token sent on every call to workers (/v1, admin and probe endpoints); must match the workers' --worker-key (default: $"+envWorkerKey+")")
	fs.DurationVar(&c.HeaderTimeout, "header-timeout", 60*time.Second, "longest wait for a worker's first byte (streaming), or for a non-streaming answer from a worker that fails a liveness check; a timeout is never retried and ejects the worker")
	fs.DurationVar(&c.ClientHeaderTimeout, "client-header-timeout", 10*time.Second, "longest a client may take to send its request headers")
	fs.DurationVar(&c.ClientReadTimeout, "client-read-timeout", 30*time.Second, "longest a client may take to send its request body (408 after)")
	fs.DurationVar(&c.ClientIdleTimeout, "client-idle-timeout", 60*time.Second, "close a keep-alive connection idle this long")
	fs.DurationVar(&c.ClientStallTimeout, "client-stall-timeout", 30*time.Second, "cut off a client that stopped reading its answer this long, and cancel its request on the worker")
	fs.Func("http-server", "client-facing HTTP `server`: h1 (the frontend's own HTTP/1.1 server, the default) or net/http (Go's standard server, slower per request: a fallback)", func(v string) error {
		switch v {
		case "h1":
			c.NetHTTPServer = false
		case "net/http":
			c.NetHTTPServer = true
		default:
			return fmt.Errorf("want h1 or net/http, got %q", v)
		}
		return nil
	})
	fs.IntVar(&c.MaxConnections, "max-connections", 4096, "open client connections at most; one more gets 503 and is closed")
	fs.IntVar(&c.MaxInflight, "max-inflight", 0, "completion requests served at once at most; more get 429 with Retry-After (0: no limit)")
	fs.IntVar(&c.MaxInflightPerWorker, "max-inflight-per-worker", 0, "requests open on one worker at most; when every worker is full, 429 with Retry-After (0: no limit)")
	fs.IntVar(&c.MaxQueue, "max-queue", 1024, "requests waiting for a worker slot at most (with --max-inflight-per-worker); one more gets 429 unless it outranks a queued one")
	fs.DurationVar(&c.QueueTimeout, "queue-timeout", 30*time.Second, "longest a request waits in the admission queue before 429 with Retry-After")
	fs.DurationVar(&c.QueueTTFT, "queue-ttft", 0, "also count a worker full (requests wait in the fair queue) while its predicted prefill queue exceeds this, e.g. the --ttft-slo; 0: off")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM or Ctrl-C, refuse new requests (503, /health draining) and finish those being served for at most this long")
	fs.StringVar(&c.ConfigFile, "config", "", "YAML file of per-model settings (tokenizer, block_size, router policy and alpha, disagg) for a fleet; models it does not name take the flags (see docs/config.md)")
	fs.StringVar(&c.TenantsFile, "tenants", "", "YAML file of tenants (name, key or key_sha256, weight, limits, max_priority): API keys name tenants, shared fairly under load, prefix caches isolated (see docs/overload.md)")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve Go profiles at /debug/pprof/ (admin access required)")
	fs.IntVar(&c.EjectAfter, "eject-after", 2, "consecutive connect failures that eject a worker from routing until a health probe answers (one timeout ejects at once)")
	fs.Func("worker-networks", "CIDR,...: refuse workers whose URL or kvxfer address is outside these networks (they show in /health as refused)", func(s string) error {
		c.WorkerNetworks = nil
		for _, p := range splitList(s) {
			n, err := netip.ParsePrefix(p)
			if err != nil {
				return fmt.Errorf("%q is not a CIDR network (e.g. 10.0.0.0/8, 127.0.0.1/32)", p)
			}
			c.WorkerNetworks = append(c.WorkerNetworks, n.Masked())
		}
		return nil
	})
	fs.DurationVar(&c.RequestTimeout, "request-timeout", 10*time.Minute, "longest upstream exchange; also bounds a non-streaming generation")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", 8<<20, "largest request body accepted; larger gets 413")
	fs.DurationVar(&c.SilenceAfter, "kv-silence-after", 0, "mark a worker's KV events silent after this long without a batch (0: 2.5 s)")
	fs.BoolVar(&c.ShareState, "share-state", true, "share routing state (in-flight load, approximate index, link probes, /admin settings) with the other frontend replicas on the bus")
	fs.StringVar(&c.ReplicaID, "replica-id", "", "this frontend's name among its replicas, unique (e.g. the pod name; empty: random)")
}

// Environment variables the key flags default to, so keys stay out of the
// process list.
const (
	envAPIKey   = "SWITCHYARD_API_KEY"
	envAdminKey = "SWITCHYARD_ADMIN_KEY"
	// envWorkerKey guards workers' /v1, admin and probe endpoints; the
	// frontend sends it.
	envWorkerKey = "SWITCHYARD_WORKER_KEY"
)

// checkFrontendConfig fills keys not given as flags from the environment
// (getenv is os.Getenv outside tests) and rejects non-positive limits.
func checkFrontendConfig(c *node.FrontendConfig, getenv func(string) string) error {
	if c.APIKey == "" {
		c.APIKey = getenv(envAPIKey)
	}
	if c.AdminKey == "" {
		c.AdminKey = getenv(envAdminKey)
	}
	if c.WorkerKey == "" {
		c.WorkerKey = getenv(envWorkerKey)
	}
	if err := checkListenAddr("--http-addr", c.HTTPAddr); err != nil {
		return err
	}
	if c.ConfigFile != "" {
		models, err := loadFleetConfig(c.ConfigFile)
		if err != nil {
			return fmt.Errorf("--config: %w", err)
		}
		c.Models = models
	}
	if c.TenantsFile != "" {
		ts, err := admit.LoadTenants(c.TenantsFile)
		if err != nil {
			return fmt.Errorf("--tenants: %w", err)
		}
		c.Tenants = ts
	}
	if _, err := router.New(router.Config{Policy: c.Policy, Alpha: c.Alpha}); err != nil {
		if c.Alpha < 0 {
			return fmt.Errorf("--router-alpha %v must not be negative", c.Alpha)
		}
		return fmt.Errorf("--router %q: want kv, round-robin, random or least-loaded", c.Policy)
	}
	if _, err := gate.ParseMode(c.Disagg); err != nil {
		return fmt.Errorf("--disagg %q: want never, always or auto", c.Disagg)
	}
	switch {
	case c.Margin >= 1:
		return fmt.Errorf("--disagg-margin %v: want a fraction below 1", c.Margin)
	case c.HeaderTimeout <= 0:
		return fmt.Errorf("--header-timeout %v must be positive", c.HeaderTimeout)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("--request-timeout %v must be positive", c.RequestTimeout)
	case c.ClientHeaderTimeout <= 0 || c.ClientReadTimeout <= 0 || c.ClientIdleTimeout <= 0 || c.ClientStallTimeout <= 0:
		return fmt.Errorf("--client-header-timeout, --client-read-timeout, --client-idle-timeout and --client-stall-timeout must be positive")
	case c.MaxConnections <= 0:
		return fmt.Errorf("--max-connections %d must be positive", c.MaxConnections)
	case c.MaxInflight < 0 || c.MaxInflightPerWorker < 0:
		return fmt.Errorf("--max-inflight and --max-inflight-per-worker must be 0 (no limit) or positive")
	case c.QueueTTFT < 0:
		return fmt.Errorf("--queue-ttft %v must not be negative", c.QueueTTFT)
	case c.MaxQueue <= 0 || c.QueueTimeout <= 0:
		return fmt.Errorf("--max-queue %d and --queue-timeout %v must be positive", c.MaxQueue, c.QueueTimeout)
	case c.EjectAfter <= 0:
		return fmt.Errorf("--eject-after %d must be positive", c.EjectAfter)
	case c.MaxBodyBytes <= 0:
		return fmt.Errorf("--max-body-bytes %d must be positive", c.MaxBodyBytes)
	}
	return nil
}

// checkListenAddr rejects a listen address that can never be bound, so a
// typo fails before anything starts rather than after.
func checkListenAddr(flagName, addr string) error {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: want host:port, e.g. 127.0.0.1:8000", flagName, addr)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return fmt.Errorf("%s %q: port %q is not in 0..65535 (0 picks a free one)", flagName, addr, portStr)
	}
	return nil
}

// checkEngineConfig rejects simulator settings NewWorker would refuse,
// naming the flag and the choices.
func checkEngineConfig(c sim.Config) error {
	if _, err := perfmodel.LookupModel(c.Model); err != nil {
		return fmt.Errorf("--model %q is not a simulator preset: pick one of %s", c.Model, strings.Join(perfmodel.ModelNames(), ", "))
	}
	if _, err := perfmodel.LookupGPU(c.GPU); err != nil {
		return fmt.Errorf("--gpu %q is not a simulator preset: pick one of %s", c.GPU, strings.Join(perfmodel.GPUNames(), ", "))
	}
	// The flags' own ranges, named; the engine's Check covers what depends
	// on several (weights that leave no room for a KV cache).
	switch {
	case c.TP < 0 || c.TP&(c.TP-1) != 0 || c.TP > 8:
		return fmt.Errorf("--tp %d: want 1, 2, 4 or 8 (0 picks the smallest that fits)", c.TP)
	case c.MaxLoRAs < 0 || c.LoRASwap < 0:
		return fmt.Errorf("--max-loras %d and --lora-swap %v: want at least 1 and not negative", c.MaxLoRAs, c.LoRASwap)
	case c.BlockSize < 1 || c.BlockSize > 1024:
		return fmt.Errorf("--block-size %d: want 1..1024 (16 is the engines' default)", c.BlockSize)
	case c.KVBlocks < 0:
		return fmt.Errorf("--kv-blocks %d: want 0 (from GPU memory) or more", c.KVBlocks)
	case !(c.GPUMemoryUtilization > 0 && c.GPUMemoryUtilization <= 1):
		return fmt.Errorf("--gpu-memory-utilization %g: want a share in (0, 1], e.g. 0.9", c.GPUMemoryUtilization)
	case c.MaxNumBatchedTokens < 1:
		return fmt.Errorf("--max-num-batched-tokens %d: want at least 1", c.MaxNumBatchedTokens)
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("--max-num-seqs %d: want at least 1", c.MaxNumSeqs)
	case !(c.Speedup > 0):
		return fmt.Errorf("--speedup %g: want more than 0 (1 = real time, 10 = ten times faster)", c.Speedup)
	}
	if err := c.Check(); err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return nil
}

// adminExposed reports whether admin endpoints would be reachable beyond
// this host's loopback: no admin key is set and addr listens on a
// non-loopback address. The frontend then admits admin requests from
// loopback clients only, which a reverse proxy on the same host turns into
// everyone. The API key does not matter: it never grants admin.
func adminExposed(c *node.FrontendConfig) bool {
	return c.AdminKey == "" && !loopbackAddr(c.HTTPAddr)
}

// loopbackAddr reports whether a listen address is reachable from this host
// only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// warnAdminExposed logs the warning adminExposed calls for.
func warnAdminExposed(log *slog.Logger, c *node.FrontendConfig) {
	if adminExposed(c) {
		log.Warn("no --admin-key (nor $"+envAdminKey+") while listening beyond loopback: "+
			"admin endpoints accept only loopback clients, and a reverse proxy on this host would make them open to everyone; set --admin-key",
			"http_addr", c.HTTPAddr)
	}
}

// newLogger logs text lines to w at the given level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// connectBus connects to --nats, failing fast with advice: it says on
// notice after a second that the server is not answering, and again every
// few seconds while it retries, so a NATS server that is not there is named
// at once rather than after ten silent seconds.
func connectBus(ctx context.Context, notice io.Writer, url, name string, opts ...nats.Option) (*nats.Conn, error) {
	const patience = 10 * time.Second
	cctx, cancel := context.WithTimeout(ctx, patience)
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		start := time.Now()
		wait := time.NewTimer(time.Second)
		defer wait.Stop()
		for {
			select {
			case <-done:
				return
			case <-wait.C:
				fmt.Fprintf(notice, "%s: NATS at %s is not answering after %.0f s; retrying until %.0f s (is the NATS server or `switchyard frontend` running? check --nats)\n",
					name, bus.RedactURL(url), time.Since(start).Seconds(), patience.Seconds())
				wait.Reset(3 * time.Second)
			}
		}
	}()
	nc, err := bus.Connect(cctx, url, name, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (is the NATS server or `switchyard frontend` running? check --nats and the NATS login)", bus.RedactURL(url), err)
	}
	return nc, nil
}

// splitList splits a comma-separated flag value.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
