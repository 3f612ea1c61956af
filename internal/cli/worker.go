package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bridge"
	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvxfer"
	"github.com/switchyard-llm/switchyard/internal/node"
	"github.com/switchyard-llm/switchyard/internal/vllmpub"
)

func init() {
	register(command{name: "worker", summary: "run one engine worker (simulated engine), or a bridge beside a vLLM or SGLang engine", run: runWorker})
}

// workerFlags are the worker's command-line settings.
type workerFlags struct {
	engineAPIs string // --engine-apis
	engine     string
	tokenizer  string
	logLevel   string
	linkRate   string
	events     kvEventsFlag
	bus        busFlags
	bridge     bridge.Config
	wire       string // --kv-events-wire: "" (NATS) or vllm
	wireArr    bool
	quirks     vllmpub.Quirks
	wireOld    bool
	replay     string
	// --model-config and --kv-cache-dtype: a bridge's KV bytes per token.
	modelConfig, kvCacheDtype string
	timingModel               string // --timing-model: a bridge's model preset for its timing profile
	tls                       kvxfer.TLSFiles
	drainTimeout              time.Duration
	node                      node.WorkerConfig
}

func parseWorkerFlags(args []string, env Env) (workerFlags, int) {
	var f workerFlags
	fs := newFlagSet("worker", "Runs one engine worker. With --nats it registers, publishes KV events and load reports;\nwithout, it serves its OpenAI API standalone.")
	fs.StringVar(&f.engine, "engine", "sim", "engine: sim (the built-in simulator), or vllm / sglang to run a bridge beside a real engine")
	fs.StringVar(&f.node.HTTPAddr, "http-addr", "127.0.0.1:8100", "HTTP listen address")
	fs.StringVar(&f.node.Sim.ID, "id", "sim-0", "worker id (unique in the deployment)")
	fs.StringVar(&f.node.Sim.Role, "role", "aggregated", "aggregated, prefill or decode")
	engineFlags(fs, &f.node.Sim)
	fleetFlags(fs, &f.node.Sim)
	tokenizerFlag(fs, &f.tokenizer)
	f.bus.add(fs, "NATS URL to register and publish KV events on (empty: standalone, no registration)")
	f.bus.login.add(fs, false)
	f.events = kvEventsFlag{on: true}
	fs.Var(&f.events, "kv-events", "sim: true/false, publish KV events (false demonstrates the frontend's health check); with --kv-events-wire vllm, the ZMQ endpoint to bind the PUB socket on (default tcp://127.0.0.1:5557);\nvllm/sglang: the engine's ZMQ PUB endpoint to dial, e.g. tcp://HOST:5557")
	fs.StringVar(&f.bridge.KVEventsListen, "kv-events-listen", "", "vllm/sglang: bind this ZMQ endpoint instead, for an engine whose kv-events endpoint connects")
	fs.StringVar(&f.replay, "kv-replay", "", "vllm/sglang: the engine's replay ROUTER endpoint to dial (its replay_endpoint), so lost batches are recovered; sim with --kv-events-wire vllm: where to bind it")
	fs.IntVar(&f.bridge.ReplayBufferSteps, "kv-replay-buffer", bridge.DefaultReplayBufferSteps, "vllm/sglang: the engine's replay buffer in batches (its kv-events-config buffer_steps): a replay shorter than this holds the engine's whole history, so a first batch numbered above 0 is not loss; sim with --kv-events-wire vllm: the buffer to keep")
	fs.StringVar(&f.bridge.Topic, "kv-topic", "", "vllm/sglang: take only messages whose topic starts with this")
	fs.StringVar(&f.bridge.EngineURL, "engine-url", "", "vllm/sglang: the engine's OpenAI endpoint, e.g. http://HOST:8000 (registered as the worker's URL)")
	fs.IntVar(&f.bridge.MaxModelLen, "max-model-len", 0, "vllm/sglang: expected max_model_len (0: the engine's); a mismatch refuses to start")
	fs.StringVar(&f.engineAPIs, "engine-apis", "auto", "vllm/sglang: the endpoints beyond chat and completions the engine serves, registered for the frontend: auto (probe each at start), none, or a comma list of messages, responses, embeddings")
	fs.IntVar(&f.bridge.KVBytesPerToken, "kv-bytes-per-token", 0, "vllm/sglang: KV cache bytes per token, for the disaggregation gate (2 × layers × KV heads × head dim × dtype bytes)")
	fs.StringVar(&f.modelConfig, "model-config", "", "vllm/sglang: the model's HuggingFace config.json, to derive --kv-bytes-per-token from layers, KV heads, head dim and dtype")
	fs.StringVar(&f.timingModel, "timing-model", "", "vllm/sglang with --gpu: the model preset whose timing, on --gpu × --tp, the gate predicts prefill with (default: --model when it names a preset)")
	fs.StringVar(&f.kvCacheDtype, "kv-cache-dtype", "", "vllm/sglang with --model-config: the engine's --kv-cache-dtype when not the model's dtype (fp8 → 1 byte)")
	fs.DurationVar(&f.bridge.RebuildHold, "kv-rebuild-hold", bridge.DefaultRebuildHold, "vllm/sglang: after engine events were lost for good, route this worker approximately for this long")
	fs.StringVar(&f.wire, "kv-events-wire", "", "sim: vllm publishes KV events on ZMQ exactly as vLLM 0.26 does (for a bridge) instead of on NATS")
	wireQuirkFlags(fs, &f.quirks, &f.wireArr, "sim with --kv-events-wire vllm")
	fs.BoolVar(&f.wireOld, "kv-replay-legacy", false, "sim with --kv-events-wire vllm: answer replay in the pre-0.26 layout [\"\", seq, payload]")
	fs.StringVar(&f.node.KVXferAddr, "kvxfer-addr", "", "prefill role: KV transfer listen address (default: the HTTP host, a free port); vllm/sglang: serve link probes here so the frontend can measure this host's link to decode engines")
	tlsFlags(fs, &f.tls)
	fs.StringVar(&f.node.WorkerKey, "worker-key", "", "require this bearer token on /v1/*, POST /reset_prefix_cache and /kvxfer/probe (default: $"+envWorkerKey+"; without one /v1 is open and the others admit loopback clients only)")
	fs.StringVar(&f.linkRate, "link-rate", "", "prefill role: emulate the link to decode workers at this rate, e.g. 1gbit (in-process token bucket)")
	fs.DurationVar(&f.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM: mark the worker draining in the registry (frontends route nothing new to it), finish what it serves, exit when idle or after this long; a bridge leaves its engine running")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	if code := parseFlags(fs, args, env); code >= 0 {
		return f, code
	}
	if f.bridge.ReplayBufferSteps < 1 {
		fmt.Fprintf(env.Stderr, "switchyard worker: --kv-replay-buffer %d: want at least 1 (vLLM's default is %d)\n", f.bridge.ReplayBufferSteps, bridge.DefaultReplayBufferSteps)
		return f, ExitUsage
	}
	if err := checkWireQuirks(f.quirks, f.wireArr, f.wire == "vllm", "--kv-events-wire"); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return f, ExitUsage
	}
	switch f.engine {
	case "sim":
	case bridge.EngineVLLM, bridge.EngineSGLang:
		if f.tokenizer != "cl100k" {
			fmt.Fprintf(env.Stderr, "switchyard worker: --tokenizer is for --engine sim; a real engine tokenizes with its own model files\n")
			return f, ExitUsage
		}
		return parseBridgeFlags(fs, f, env)
	default:
		fmt.Fprintf(env.Stderr, "switchyard worker: --engine %q: want sim, vllm or sglang\n", f.engine)
		return f, ExitUsage
	}
	switch f.wire {
	case "":
		if f.events.endpoint != "" || f.replay != "" {
			fmt.Fprintf(env.Stderr, "switchyard worker: --kv-events %s / --kv-replay need --kv-events-wire vllm (or --engine vllm|sglang for a bridge)\n", f.events.endpoint)
			return f, ExitUsage
		}
	case "vllm":
		if f.bus.nats != "" {
			fmt.Fprintln(env.Stderr, "switchyard worker: --kv-events-wire vllm makes the simulator a stand-alone engine: drop --nats and run a bridge beside it (switchyard worker --engine vllm --nats ...)")
			return f, ExitUsage
		}
		ep := f.events.endpoint
		if ep == "" {
			ep = "tcp://127.0.0.1:5557"
		}
		f.node.EngineWire = &vllmpub.Config{Endpoint: ep, ReplayEndpoint: f.replay, LegacyReplay: f.wireOld,
			Layout: enginewire.Layout{ArrayEvents: f.wireArr}, Quirks: f.quirks, BufferSteps: f.bridge.ReplayBufferSteps}
	default:
		fmt.Fprintf(env.Stderr, "switchyard worker: --kv-events-wire %q: want vllm\n", f.wire)
		return f, ExitUsage
	}
	switch f.node.Sim.Role {
	case bus.RoleAggregated, bus.RolePrefill, bus.RoleDecode:
	default:
		fmt.Fprintf(env.Stderr, "switchyard worker: --role %q: want aggregated, prefill or decode\n", f.node.Sim.Role)
		return f, ExitUsage
	}
	if err := checkListenAddr("--http-addr", f.node.HTTPAddr); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return f, ExitUsage
	}
	if err := checkEngineConfig(f.node.Sim); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return f, ExitUsage
	}
	if err := f.bus.check(); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return f, ExitUsage
	}
	var err error
	if f.node.LinkRate, err = parseLinkRate(f.linkRate); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return f, ExitUsage
	}
	f.node.KVEventsOff = !f.events.on
	if f.node.WorkerKey == "" {
		f.node.WorkerKey = os.Getenv(envWorkerKey)
	}
	return f, -1
}

func runWorker(ctx context.Context, args []string, env Env) int {
	f, code := parseWorkerFlags(args, env)
	if code >= 0 {
		return code
	}
	if f.engine != "sim" {
		return runBridge(ctx, f, env)
	}
	log, err := newLogger(env.Stderr, f.logLevel)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitUsage
	}
	cfg := f.node
	cfg.Logger = log
	if cfg.WorkerKey == "" && !loopbackAddr(cfg.HTTPAddr) {
		log.Warn("no --worker-key (nor $"+envWorkerKey+") while listening beyond loopback: /reset_prefix_cache and /kvxfer/probe "+
			"admit loopback clients only, so a frontend on another host cannot reset caches or probe links; set --worker-key here and on the frontend",
			"http_addr", cfg.HTTPAddr)
	}
	if err := applyTLS(f.tls, &cfg); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitUsage
	}
	if f.bus.nats != "" {
		if cfg.Subjects, err = bus.NewSubjects(f.bus.namespace); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard worker: --namespace: %v\n", err)
			return ExitUsage
		}
		opts, err := f.bus.login.options(os.Getenv, bus.WorkerUser(cfg.Sim.ID), bus.WorkerInboxPrefix(cfg.Sim.ID))
		if err != nil {
			fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
			return ExitUsage
		}
		nc, err := connectBus(ctx, env.Stderr, f.bus.nats, "switchyard-worker-"+cfg.Sim.ID, opts...)
		if err != nil {
			if errors.Is(err, nats.ErrAuthorization) {
				err = fmt.Errorf("%w\n  a frontend's embedded NATS requires each worker's own login: "+
					"SWITCHYARD_NATS_PASSWORD=$(switchyard nats-password --secret-file SECRET --id %s) switchyard worker --id %s ... "+
					"(the frontend prints where its secret is)", err, cfg.Sim.ID, cfg.Sim.ID)
			}
			fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
			return ExitFail
		}
		defer nc.Close()
		if err := f.bus.guardBus(ctx, nc, log); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
			return ExitFail
		}
		cfg.NC = nc
		// A worker that logs in is held to worker permissions, which
		// grant no JetStream: it registers through the frontend.
		cfg.RegistryViaFrontend = f.bus.login.hasLogin(os.Getenv)
		cfg.RegistryTTL = f.bus.registryTTL
	}
	if cfg.Sim.Tokenizer, err = openTokenizer(f.tokenizer); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	w, err := node.StartWorker(ctx, cfg)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	info := w.Info()
	fmt.Fprintf(env.Stderr, "switchyard worker %s (%s, %s on %d × %s, %d KV blocks of %d tokens, max_model_len %d)\n",
		info.ID, info.Role, info.Model, info.Profile.TP, info.Profile.GPU, info.KVBlocks, info.BlockSize, info.MaxModelLen)
	if p := info.Profile; p.CPUBlocks > 0 {
		fmt.Fprintf(env.Stderr, "  lower KV tiers: %d blocks in host memory, %d on disk; host link %.1f GB/s per GPU\n", p.CPUBlocks, p.DiskBlocks, p.HostLinkBandwidth/1e9)
	}
	if info.KVXferAddr != "" {
		fmt.Fprintf(env.Stderr, "  KV transfer on %s%s\n", info.KVXferAddr, map[bool]string{true: ", link emulated at " + f.node.LinkRate.String(), false: ""}[f.node.LinkRate > 0])
	}
	if cfg.NC == nil {
		fmt.Fprintln(env.Stderr, "  standalone: not registered (give --nats URL to join a deployment)")
	}
	if wc := cfg.EngineWire; wc != nil {
		replay := ""
		if wc.ReplayEndpoint != "" {
			replay = ", replay on " + wc.ReplayEndpoint
		}
		fmt.Fprintf(env.Stderr, "  KV events on ZMQ %s in vLLM's wire%s: run a bridge beside it (switchyard worker --engine vllm --engine-url %s --kv-events %s --nats URL)\n",
			wc.Endpoint, replay, w.URL(), wc.Endpoint)
	}
	fmt.Fprintf(env.Stdout, "ready: %s\n", w.URL())
	select {
	case <-ctx.Done():
		fmt.Fprintf(env.Stderr, "draining: marked draining, finishing the requests in flight (at most %v)...\n", f.drainTimeout)
		if left := w.Drain(context.Background(), f.drainTimeout); left > 0 {
			fmt.Fprintf(env.Stderr, "drain timeout: %d requests still running are cut\n", left)
		} else {
			fmt.Fprintln(env.Stderr, "drained: idle, exiting")
		}
	case <-w.Done():
	}
	if err := w.Close(); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	return ExitOK
}
