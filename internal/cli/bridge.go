package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/bridge"
	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/node"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// kvEventsFlag is --kv-events: a bool for the simulator (true/false), an
// endpoint for a bridge or a vLLM-wire simulator.
type kvEventsFlag struct {
	on       bool
	endpoint string
}

func (k *kvEventsFlag) String() string {
	if k == nil {
		return ""
	}
	if k.endpoint != "" {
		return k.endpoint
	}
	return strconv.FormatBool(k.on)
}

func (k *kvEventsFlag) Set(s string) error {
	if b, err := strconv.ParseBool(s); err == nil {
		k.on, k.endpoint = b, ""
		return nil
	}
	if !strings.Contains(s, "://") {
		return fmt.Errorf("want true, false or a ZMQ endpoint such as tcp://HOST:5557")
	}
	k.on, k.endpoint = true, s
	return nil
}

// parseBridgeFlags finishes the worker's flags for --engine vllm|sglang.
func parseBridgeFlags(fs *flag.FlagSet, f workerFlags, env Env) (workerFlags, int) {
	bad := func(format string, a ...any) (workerFlags, int) {
		fmt.Fprintf(env.Stderr, "switchyard worker: "+format+"\n", a...)
		return f, ExitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	b := &f.bridge
	b.Engine, b.ID, b.Role, b.HTTPAddr = f.engine, f.node.Sim.ID, f.node.Sim.Role, f.node.HTTPAddr
	b.BlockSize = f.node.Sim.BlockSize
	b.KVEvents, b.KVReplay = f.events.endpoint, f.replay
	if set["model"] {
		b.Model = f.node.Sim.Model
	}
	if !set["http-addr"] {
		b.HTTPAddr = "127.0.0.1:0" // the bridge's own /metrics and /health; printed at start
	}
	if !set["id"] {
		b.ID = f.engine + "-0"
	}
	switch f.engineAPIs {
	case "auto", "":
	case "none":
		b.APIs = []string{}
	default:
		for _, a := range strings.Split(f.engineAPIs, ",") {
			a = strings.TrimSpace(a)
			if a != "messages" && a != "responses" && a != "embeddings" {
				return bad("--engine-apis %q: want auto, none, or a comma list of messages, responses, embeddings", f.engineAPIs)
			}
			b.APIs = append(b.APIs, a)
		}
	}
	switch {
	case b.EngineURL == "":
		return bad("--engine %s needs --engine-url http://HOST:PORT (the engine's OpenAI endpoint)", f.engine)
	case !strings.HasPrefix(b.EngineURL, "http://") && !strings.HasPrefix(b.EngineURL, "https://"):
		return bad("--engine-url %q: want http://HOST:PORT", b.EngineURL)
	case (b.KVEvents == "") == (b.KVEventsListen == ""):
		return bad("--engine %s needs exactly one of --kv-events tcp://HOST:5557 (the engine binds, vLLM's default) and --kv-events-listen tcp://ADDR:PORT (the engine connects)", f.engine)
	case f.bus.nats == "":
		return bad("--engine %s needs --nats URL: the bridge registers the engine and republishes its events there", f.engine)
	case f.wire != "":
		return bad("--kv-events-wire is for --engine sim")
	case !f.events.on:
		return bad("--kv-events=false makes no sense for a bridge: it exists to carry the engine's events")
	}
	switch b.Role {
	case bus.RoleAggregated, bus.RolePrefill, bus.RoleDecode:
	default:
		return bad("--role %q: want aggregated, prefill or decode", b.Role)
	}
	if err := checkListenAddr("--http-addr", b.HTTPAddr); err != nil {
		return bad("%v", err)
	}
	if f.modelConfig != "" {
		n, err := bridge.KVBytesPerToken(f.modelConfig, f.kvCacheDtype)
		if err != nil {
			return bad("%v", err)
		}
		if b.KVBytesPerToken != 0 && b.KVBytesPerToken != n {
			return bad("--kv-bytes-per-token %d but --model-config %s gives %d: drop one", b.KVBytesPerToken, f.modelConfig, n)
		}
		b.KVBytesPerToken = n
	}
	b.KVXferAddr = f.node.KVXferAddr
	if b.KVXferAddr != "" && b.Role != bus.RolePrefill {
		return bad("--kvxfer-addr is for --role prefill; a decode bridge answers the frontend's link probes on its --http-addr")
	}
	if b.WorkerKey = f.node.WorkerKey; b.WorkerKey == "" {
		b.WorkerKey = os.Getenv(envWorkerKey)
	}
	var w node.WorkerConfig
	if err := applyTLS(f.tls, &w); err != nil {
		return bad("%v", err)
	}
	b.KVXferServerTLS, b.KVXferClientTLS = w.KVXferServerTLS, w.KVXferClientTLS
	if f.linkRate != "" {
		return bad("--link-rate emulates a link for --engine sim; a bridge measures the real one")
	}
	var err error
	if b.Profile, err = bridgeProfile(f, set); err != nil {
		return bad("%v", err)
	}
	return f, -1
}

// bridgeProfile is a bridged engine's timing profile from --gpu (and --tp,
// --max-num-batched-tokens) with the model preset --timing-model, or --model
// when that names a preset; zero without --gpu.
func bridgeProfile(f workerFlags, set map[string]bool) (bus.Profile, error) {
	if !set["gpu"] {
		if f.timingModel != "" {
			return bus.Profile{}, fmt.Errorf("--timing-model needs --gpu: the timing profile is the model preset on that GPU preset")
		}
		return bus.Profile{}, nil
	}
	name := f.timingModel
	if name == "" && set["model"] {
		name = f.node.Sim.Model
	}
	if name == "" {
		return bus.Profile{}, fmt.Errorf("--gpu %s gives the engine a timing profile but no model preset names its model: add --timing-model (one of %v)", f.node.Sim.GPU, perfmodel.ModelNames())
	}
	m, err := perfmodel.LookupModel(name)
	if err != nil {
		return bus.Profile{}, fmt.Errorf("--timing-model: %w", err)
	}
	g, err := perfmodel.LookupGPU(f.node.Sim.GPU)
	if err != nil {
		return bus.Profile{}, fmt.Errorf("--gpu: %w", err)
	}
	tp := f.node.Sim.TP
	if tp == 0 {
		if tp, err = perfmodel.DefaultTP(m, g, f.node.Sim.GPUMemoryUtilization); err != nil {
			return bus.Profile{}, fmt.Errorf("--gpu: %w (give --tp)", err)
		}
	}
	p := perfmodel.NewProfile(m, g, tp)
	p.MaxBatchTokens = f.node.Sim.MaxNumBatchedTokens
	return p, nil
}

func runBridge(ctx context.Context, f workerFlags, env Env) int {
	log, err := newLogger(env.Stderr, f.logLevel)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitUsage
	}
	cfg := f.bridge
	cfg.Logger = log
	if os.Getenv("GOGC") == "" {
		// The bridge's heap is its mirror, long-lived and only growing
		// with the engine's cache: a tighter GC target keeps RSS near it
		// (1M blocks: 87 MiB at the default 100, measured with
		// BenchmarkBridgeMillionBlocks; see the README's figures).
		debug.SetGCPercent(50)
	}
	if cfg.Subjects, err = bus.NewSubjects(f.bus.namespace); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: --namespace: %v\n", err)
		return ExitUsage
	}
	// The bridge logs in as the worker it registers.
	opts, err := f.bus.login.options(os.Getenv, bus.WorkerUser(cfg.ID), bus.WorkerInboxPrefix(cfg.ID))
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitUsage
	}
	nc, err := connectBus(ctx, env.Stderr, f.bus.nats, "switchyard-bridge-"+cfg.ID, opts...)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	defer nc.Close()
	if err := f.bus.guardBus(ctx, nc, log); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	cfg.NC, cfg.RegistryTTL = nc, f.bus.registryTTL
	cfg.RegistryViaFrontend = f.bus.login.hasLogin(os.Getenv) // see runWorker
	fmt.Fprintf(env.Stderr, "switchyard worker %s: bridging the %s engine at %s ...\n", cfg.ID, cfg.Engine, cfg.EngineURL)
	b, err := bridge.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	info := b.Info()
	events := cfg.KVEvents
	if events == "" {
		events = "listening on " + cfg.KVEventsListen
	}
	replay := "no replay (lost batches force a rebuild)"
	if cfg.KVReplay != "" {
		replay = "replay " + cfg.KVReplay
	}
	fmt.Fprintf(env.Stderr, "switchyard worker %s (%s, %s, max_model_len %d, %d KV blocks of %d tokens)\n  events %s, %s\n",
		info.ID, info.Role, info.Model, info.MaxModelLen, info.KVBlocks, info.BlockSize, events, replay)
	if p := info.Profile; p.PeakFLOPS > 0 {
		fmt.Fprintf(env.Stderr, "  timing profile: %s on %d × %s (presets; the gate predicts prefill from it)\n", p.Model, p.TP, p.GPU)
	} else if info.Role != bus.RoleAggregated {
		fmt.Fprintln(env.Stderr, "  no timing profile: the gate cannot price remote prefill for this worker and keeps it local (give --gpu and --timing-model)")
	}
	if info.KVXferAddr != "" {
		fmt.Fprintf(env.Stderr, "  kvxfer on %s (link probes only)\n", info.KVXferAddr)
	}
	if info.ProbeURL != "" {
		fmt.Fprintf(env.Stderr, "  answers link probes at %s/kvxfer/probe\n", info.ProbeURL)
	}
	fmt.Fprintf(env.Stdout, "ready: %s (bridge %s)\n", info.HTTPURL, b.URL())
	select {
	case <-ctx.Done():
		fmt.Fprintf(env.Stderr, "draining: marked draining, waiting for the engine to go idle (at most %v); the engine keeps running\n", f.drainTimeout)
		if !b.Drain(context.Background(), f.drainTimeout) {
			fmt.Fprintln(env.Stderr, "drain timeout: the engine still has requests; deregistering anyway")
		}
	case <-b.Done():
	}
	if err := b.Close(); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	return ExitOK
}
