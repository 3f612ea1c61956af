package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/switchyard-llm/switchyard/internal/bench"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
)

func init() {
	register(command{name: "ceiling", summary: "the hit ratio an LRU cache of a cluster's KV capacity would reach on a Mooncake trace", run: runCeiling})
}

const ceilingAbout = `Replays a Mooncake trace's prefix blocks (hash_ids) through one LRU cache as large
as the whole cluster's KV capacity (--workers × the engine's GPU blocks, plus
--kv-offload-gib and --kv-disk-gib per worker), and through an unbounded one, and
prints the token hit ratio of each: what a perfect router could reach with that much
cache in one place. A cluster splits it over workers, so it reaches less.

  switchyard ceiling --trace FILE --max-requests 1000 --workers 4 --model llama-3.1-8b --gpu h100 --kv-offload-gib 256`

func runCeiling(_ context.Context, args []string, env Env) int {
	fs := newFlagSet("ceiling", ceilingAbout)
	var cfg sim.Config
	engineFlags(fs, &cfg)
	trace := fs.String("trace", "", "Mooncake trace file (required)")
	skip := fs.Int("skip", 0, "skip the trace's first N requests")
	maxReq := fs.Int("max-requests", 0, "use the first N requests after --skip (0 = all)")
	workers := fs.Int("workers", 4, "workers whose caches add up to the capacity")
	if code := parseFlags(fs, args, env); code >= 0 {
		return code
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(env.Stderr, "switchyard ceiling: "+format+"\n", a...)
		return ExitUsage
	}
	if *trace == "" {
		return bad("--trace: a Mooncake trace file is required, e.g. --trace shared/data/traces/mooncake_synthetic_trace.jsonl")
	}
	if *workers < 1 || *maxReq < 0 || *skip < 0 {
		return bad("--workers must be >= 1, --skip and --max-requests >= 0")
	}
	core, err := sim.NewCore(cfg, false)
	if err != nil {
		return bad("%v", err)
	}
	reqs, err := bench.ReadTraceSlice(*trace, bench.FormatMooncake, *skip, *maxReq)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard ceiling: %v\n", err)
		return ExitFail
	}
	bs := core.BlockSize()
	p := core.Profile()
	w := int64(*workers)
	gpu := w * int64(core.TotalBlocks()*bs)
	lower := w * int64((p.CPUBlocks+p.DiskBlocks)*bs)
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "one LRU cache of\tcapacity tokens\thit ratio (tokens)\t\n")
	fmt.Fprintf(tw, "%d × GPU\t%d\t%.3f\t\n", w, gpu, bench.LRUCeiling(reqs, gpu, bs))
	if lower > 0 {
		fmt.Fprintf(tw, "%d × (GPU + lower tiers)\t%d\t%.3f\t\n", w, gpu+lower, bench.LRUCeiling(reqs, gpu+lower, bs))
	}
	fmt.Fprintf(tw, "unbounded\t-\t%.3f\t\n", bench.LRUCeiling(reqs, 0, bs))
	if err := tw.Flush(); err != nil {
		return ExitFail
	}
	fmt.Fprintf(env.Stderr, "%d requests of %s; %s on %s, %d-token blocks\n", len(reqs), *trace, cfg.Model, cfg.GPU, bs)
	return ExitOK
}
