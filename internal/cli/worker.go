package cli

import (
	"context"
	"fmt"
	"os"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvxfer"
	"github.com/switchyard-llm/switchyard/internal/node"
)

func init() {
	register(command{name: "worker", summary: "run one engine worker (simulated engine)", run: runWorker})
}

// workerFlags are the worker's command-line settings.
type workerFlags struct {
	engine   string
	logLevel string
	linkRate string
	eventsOn bool
	bus      busFlags
	tls      kvxfer.TLSFiles
	node     node.WorkerConfig
}

func parseWorkerFlags(args []string, env Env) (workerFlags, int) {
	var f workerFlags
	fs := newFlagSet("worker", "Runs one engine worker. With --nats it registers, publishes KV events and load reports;\nwithout, it serves its OpenAI API standalone.")
	fs.StringVar(&f.engine, "engine", "sim", "engine: sim (the built-in simulator)")
	fs.StringVar(&f.node.HTTPAddr, "http-addr", "127.0.0.1:8100", "HTTP listen address")
	fs.StringVar(&f.node.Sim.ID, "id", "sim-0", "worker id (unique in the deployment)")
	fs.StringVar(&f.node.Sim.Role, "role", "aggregated", "aggregated, prefill or decode")
	engineFlags(fs, &f.node.Sim)
	f.bus.add(fs, "NATS URL to register and publish KV events on (empty: standalone, no registration)")
	f.bus.login.add(fs, false)
	fs.BoolVar(&f.eventsOn, "kv-events", true, "publish KV events (false demonstrates the frontend's health check)")
	fs.StringVar(&f.node.KVXferAddr, "kvxfer-addr", "", "prefill role: KV transfer listen address (default: the HTTP host, a free port)")
	tlsFlags(fs, &f.tls)
	fs.StringVar(&f.node.WorkerKey, "worker-key", "", "require this bearer token on POST /reset_prefix_cache and /kvxfer/probe (default: $"+envWorkerKey+"; without one they admit loopback clients only)")
	fs.StringVar(&f.linkRate, "link-rate", "", "prefill role: emulate the link to decode workers at this rate, e.g. 1gbit (in-process token bucket)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	if code := parseFlags(fs, args, env); code >= 0 {
		return f, code
	}
	if f.engine != "sim" {
		fmt.Fprintf(env.Stderr, "switchyard worker: engine %q is not available; use --engine sim\n", f.engine)
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
	var err error
	if f.node.LinkRate, err = parseLinkRate(f.linkRate); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return f, ExitUsage
	}
	f.node.KVEventsOff = !f.eventsOn
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
		nc, err := connectBus(ctx, f.bus.nats, "switchyard-worker-"+cfg.Sim.ID, opts...)
		if err != nil {
			fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
			return ExitFail
		}
		defer nc.Close()
		cfg.NC = nc
		cfg.RegistryTTL = f.bus.registryTTL
	}
	w, err := node.StartWorker(ctx, cfg)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	info := w.Info()
	fmt.Fprintf(env.Stderr, "switchyard worker %s (%s, %s on %d × %s, %d KV blocks of %d tokens, max_model_len %d)\n",
		info.ID, info.Role, info.Model, info.Profile.TP, info.Profile.GPU, info.KVBlocks, info.BlockSize, info.MaxModelLen)
	if info.KVXferAddr != "" {
		fmt.Fprintf(env.Stderr, "  KV transfer on %s%s\n", info.KVXferAddr, map[bool]string{true: ", link emulated at " + f.node.LinkRate.String(), false: ""}[f.node.LinkRate > 0])
	}
	if cfg.NC == nil {
		fmt.Fprintln(env.Stderr, "  standalone: not registered (give --nats URL to join a deployment)")
	}
	fmt.Fprintf(env.Stdout, "ready: %s\n", w.URL())
	select {
	case <-ctx.Done():
	case <-w.Done():
	}
	if err := w.Close(); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	return ExitOK
}
