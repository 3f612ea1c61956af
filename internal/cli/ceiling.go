package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
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

// checkMooncake refuses a trace that is not Mooncake JSONL before reading
// it: ceiling needs the prefix blocks (hash_ids) only Mooncake traces carry,
// so the trace reader's advice to pass --format azure does not apply here.
func checkMooncake(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--trace: %w", err)
	}
	defer f.Close()
	b := make([]byte, 512)
	n, _ := f.Read(b)
	head := bytes.TrimLeft(b[:n], " \t\r\n\ufeff")
	if len(head) > 0 && head[0] != '{' {
		return fmt.Errorf("--trace %s is not a Mooncake JSONL trace (its first line is not a JSON object): ceiling needs the prefix blocks (hash_ids) that only Mooncake traces carry", path)
	}
	return nil
}

func runCeiling(_ context.Context, args []string, env Env) int {
	fs := newFlagSet("ceiling", ceilingAbout)
	var cfg sim.Config
	// Only the engine settings that size the KV cache: the scheduler's
	// would be accepted and ignored.
	engine := flag.NewFlagSet("", flag.ContinueOnError)
	engineFlags(engine, &cfg)
	engine.VisitAll(func(f *flag.Flag) {
		switch f.Name {
		case "model", "gpu", "tp", "block-size", "kv-blocks", "gpu-memory-utilization", "kv-offload-gib", "kv-disk-gib":
			fs.Var(f.Value, f.Name, f.Usage)
			fs.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	trace := fs.String("trace", "", "Mooncake trace file (required)")
	skip := fs.Int("skip", 0, "skip the trace's first N requests")
	maxReq := fs.Int("max-requests", 0, "use the first N requests after --skip (0 = all)")
	workers := fs.Int("workers", 2, "workers whose caches add up to the capacity (the default is up's)")
	if code := parseFlags(fs, args, env); code >= 0 {
		return code
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(env.Stderr, "switchyard ceiling: "+format+"\n", a...)
		return ExitUsage
	}
	if *trace == "" {
		return bad("--trace: a Mooncake trace file is required, e.g. --trace traces/mooncake_synthetic_trace.jsonl")
	}
	switch {
	case *workers < 1:
		return bad("--workers %d: want at least 1", *workers)
	case *skip < 0:
		return bad("--skip %d: want 0 or more", *skip)
	case *maxReq < 0:
		return bad("--max-requests %d: want 0 (all) or more", *maxReq)
	}
	core, err := sim.NewCore(cfg, false)
	if err != nil {
		return bad("%v", err)
	}
	if err := checkMooncake(*trace); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard ceiling: %v\n", err)
		return ExitUsage
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
