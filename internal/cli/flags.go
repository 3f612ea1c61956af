package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/kvxfer"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
	"github.com/switchyard-llm/switchyard/internal/node"
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
}

// busFlags are the settings every process on the bus shares.
type busFlags struct {
	nats        string
	namespace   string
	registryTTL time.Duration
}

func (b *busFlags) add(fs *flag.FlagSet, natsHelp string) {
	fs.StringVar(&b.nats, "nats", "", natsHelp)
	fs.StringVar(&b.namespace, "namespace", "default", "namespace of this deployment's subjects, so deployments can share one NATS")
	fs.DurationVar(&b.registryTTL, "registry-ttl", 6*time.Second, "a worker that stops heartbeating leaves routing within this time")
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
	fs.StringVar(&c.Disagg, "disagg", "auto", "disaggregated prefill: never, always, auto (remote only when the measured link makes it pay)")
	fs.Float64Var(&c.Margin, "disagg-margin", 0.1, "auto: remote prefill must be predicted this fraction faster than local")
	fs.DurationVar(&c.TTFTSLO, "ttft-slo", 2*time.Second, "time-to-first-token target (disaggregation gate)")
	fs.DurationVar(&c.ITLSLO, "itl-slo", 100*time.Millisecond, "inter-token latency target (disaggregation gate)")
	fs.StringVar(&c.APIKey, "api-key", "", "require this bearer token on /v1/*")
	fs.StringVar(&c.AdminKey, "admin-key", "", "bearer token for /admin/* (default: --api-key; with neither, admin is loopback-only)")
	fs.DurationVar(&c.SilenceAfter, "kv-silence-after", 0, "mark a worker's KV events silent after this long without a batch (0: 2.5 s)")
}

// newLogger logs text lines to w at the given level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// connectBus connects to --nats, failing fast with advice.
func connectBus(ctx context.Context, url, name string) (*nats.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, err := bus.Connect(cctx, url, name)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w (is the NATS server or `switchyard frontend` running? check --nats)", url, err)
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
