package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/switchyard-llm/switchyard/internal/engine/sim"
)

func init() {
	register(command{name: "worker", summary: "run one engine worker (simulated engine)", run: runWorker})
}

// workerFlags are the worker's command-line settings.
type workerFlags struct {
	engine   string
	httpAddr string
	sim      sim.Config
}

func parseWorkerFlags(args []string, env Env) (workerFlags, int) {
	var f workerFlags
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&f.engine, "engine", "sim", "engine: sim (the built-in simulator)")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8100", "HTTP listen address")
	fs.StringVar(&f.sim.ID, "id", "sim-0", "worker id")
	fs.StringVar(&f.sim.Role, "role", "aggregated", "aggregated, prefill or decode")
	fs.StringVar(&f.sim.Model, "model", "qwen3-0.6b", "model preset: qwen3-0.6b, llama-3.1-8b, qwen3-32b, llama-3.1-70b, llama-2-70b")
	fs.StringVar(&f.sim.GPU, "gpu", "rtx-4060", "GPU preset: rtx-4060, l4, a100-80g, h100, h200")
	fs.IntVar(&f.sim.TP, "tp", 0, "tensor parallelism (0: smallest that fits the weights)")
	fs.IntVar(&f.sim.BlockSize, "block-size", 16, "tokens per KV block")
	fs.IntVar(&f.sim.KVBlocks, "kv-blocks", 0, "KV blocks (0: from GPU memory)")
	fs.Float64Var(&f.sim.GPUMemoryUtilization, "gpu-memory-utilization", 0.9, "share of GPU memory for weights and KV cache")
	fs.IntVar(&f.sim.MaxNumBatchedTokens, "max-num-batched-tokens", 8192, "token budget per scheduler step")
	fs.IntVar(&f.sim.MaxNumSeqs, "max-num-seqs", 256, "running sequences at most")
	fs.Float64Var(&f.sim.Speedup, "speedup", 1, "simulated seconds per wall-clock second")
	fs.Int64Var(&f.sim.Seed, "seed", 0, "generation seed for requests that carry none")
	if code := parseFlags(fs, args, env); code >= 0 {
		return f, code
	}
	if f.engine != "sim" {
		fmt.Fprintf(env.Stderr, "switchyard worker: engine %q is not available; use --engine sim\n", f.engine)
		return f, ExitUsage
	}
	return f, -1
}

func runWorker(ctx context.Context, args []string, env Env) int {
	f, code := parseWorkerFlags(args, env)
	if code >= 0 {
		return code
	}
	f.sim.Logger = slog.New(slog.NewTextHandler(env.Stderr, nil))
	w, err := startSimWorker(f.sim)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	ln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: listen on %s: %v (is another worker using the port? pick one with --http-addr)\n", f.httpAddr, err)
		return ExitFail
	}
	if err := serveSimWorker(ctx, w, ln, env); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard worker: %v\n", err)
		return ExitFail
	}
	return ExitOK
}

// startSimWorker builds a simulated worker; `up` calls it once per worker.
func startSimWorker(cfg sim.Config) (*sim.Worker, error) {
	return sim.NewWorker(cfg)
}

// serveSimWorker runs w's scheduler and serves its API on ln until ctx is
// done, then shuts both down and waits for them.
func serveSimWorker(ctx context.Context, w *sim.Worker, ln net.Listener, env Env) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 10 * time.Second}
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(ctx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	c := w.Config()
	info := w.Info()
	fmt.Fprintf(env.Stderr, "switchyard worker %s (%s on %d × %s, %d KV blocks of %d tokens, max_model_len %d) listening on http://%s\n",
		c.ID, c.Model, c.TP, c.GPU, info.KVBlocks, info.BlockSize, info.MaxModelLen, ln.Addr())
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-serveDone:
		cancel()
	}
	shutCtx, shutCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer shutCancel()
	cancel() // stop the engine first so streaming handlers finish
	runErr := <-runDone
	_ = srv.Shutdown(shutCtx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	return runErr
}
