package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bench"
	"github.com/switchyard-llm/switchyard/internal/gate"
	"github.com/switchyard-llm/switchyard/internal/simulate"
)

func init() {
	register(command{name: "simulate", summary: "replay a trace on a virtual-time cluster: how many GPUs, which router, disaggregate or not", run: runSimulate})
}

const simulateAbout = `Replays a trace through the production router, KV index, disaggregation gate and
engine scheduler in virtual time, and prints the same report as bench, plus cost.

  switchyard simulate --trace FILE --workers 8 --router kv --gpu h100 --model llama-3.1-8b
  switchyard simulate --trace FILE --sweep workers=4,8,16 router=kv,round-robin

--sweep takes dimensions KEY=V1,V2,... (keys: workers, prefill-workers, router,
disagg, link, gpu, model, tp); it runs the cross product and ranks it by goodput
per GPU, recommended configuration first.

--compare LIVE.json sets a bench trace --json report of the same slice against
the simulation: TTFT p50 and p99, hit ratio, goodput (and the prefill local/remote
split when disaggregated), each with live's distance from the simulation, cells
beyond --compare-tolerance marked. --seeds 1-5 compares with the mean of five
simulations. A live report of another slice, SLO or cluster shape is refused.

  switchyard simulate --trace FILE --skip 3000 --max-requests 400 --workers 4 --router kv \
    --model llama-3.1-8b --gpu h100 --compare live.json --seeds 1-5`

type simulateCmd struct {
	cfg        simulate.Config
	jsonPath   string
	jsonOut    io.Writer // where --json - goes: the process's stdout
	plotPath   string
	cpuProfile string
	tile       int
	longShare  float64
	longTokens int
	sweep      []sweepDim
	minGood    float64
	compare    string  // live report to compare with
	tolerance  float64 // relative
	seeds      []int64 // with compare: one simulation per seed
}

func parseSimulate(args []string, env Env) (simulateCmd, int) {
	c := simulateCmd{cfg: simulate.DefaultConfig()}
	cfg := &c.cfg
	fs := newFlagSet("simulate", simulateAbout)
	fs.StringVar(&cfg.TracePath, "trace", "", "trace file (required)")
	fs.StringVar(&cfg.TraceFormat, "format", "", "trace format: mooncake or azure (default: azure for a .csv file, else mooncake)")
	fs.IntVar(&cfg.Skip, "skip", 0, "skip the trace's first N requests; the slice's first arrives at 0")
	fs.IntVar(&cfg.MaxRequests, "max-requests", 0, "replay at most this many trace requests after --skip (0 = all)")
	fs.Float64Var(&cfg.TimeScale, "time-scale", cfg.TimeScale, "multiply trace timestamps by this (0.5 = twice as fast)")
	fs.Float64Var(&c.longShare, "long-share", 0, "give this share of requests (chosen by --seed) --long-tokens input tokens and a unique prompt, as bench trace --long-share")
	fs.IntVar(&c.longTokens, "long-tokens", 4000, "input length of the requests --long-share picks")
	fs.IntVar(&c.tile, "tile", 1, "repeat the trace this many times back to back, each copy with fresh hash ids (scale tests)")
	fs.IntVar(&cfg.Workers, "workers", 2, "decode workers (aggregated when --prefill-workers is 0); the default is up's")
	fs.IntVar(&cfg.PrefillWorkers, "prefill-workers", 0, "prefill-role workers (disaggregated serving)")
	fs.StringVar(&cfg.Engine.Model, "model", cfg.Engine.Model, "model preset: qwen3-0.6b, llama-3.1-8b, qwen3-32b, llama-3.1-70b, llama-2-70b")
	fs.StringVar(&cfg.Engine.GPU, "gpu", cfg.Engine.GPU, "GPU preset: rtx-4060, l4, a100-80g, h100, h200")
	fs.IntVar(&cfg.Engine.TP, "tp", 0, "tensor parallelism per worker (0: smallest that fits the weights)")
	fs.IntVar(&cfg.Engine.BlockSize, "block-size", cfg.Engine.BlockSize, "tokens per KV block")
	fs.IntVar(&cfg.Engine.KVBlocks, "kv-blocks", 0, "KV blocks per worker (0: from GPU memory)")
	fs.Float64Var(&cfg.Engine.GPUMemoryUtilization, "gpu-memory-utilization", cfg.Engine.GPUMemoryUtilization, "share of GPU memory for weights and KV cache")
	fs.IntVar(&cfg.Engine.MaxNumBatchedTokens, "max-num-batched-tokens", cfg.Engine.MaxNumBatchedTokens, "token budget per scheduler step")
	fs.IntVar(&cfg.Engine.MaxNumSeqs, "max-num-seqs", cfg.Engine.MaxNumSeqs, "running sequences at most")
	fs.Float64Var(&cfg.Engine.KVOffloadGiB, "kv-offload-gib", 0, "host-memory KV tier per worker, GiB (0: none)")
	fs.Float64Var(&cfg.Engine.KVDiskGiB, "kv-disk-gib", 0, "disk KV tier per worker below host memory, GiB (needs --kv-offload-gib)")
	fs.StringVar(&cfg.Router, "router", cfg.Router, "router policy: kv, round-robin, random or least-loaded")
	fs.Float64Var(&cfg.Alpha, "router-alpha", 1, "kv policy: weight of prefill blocks against decode blocks")
	fs.BoolVar(&cfg.TierBlind, "router-tier-blind", false, "kv: count lower-tier hits as misses instead of pricing them")
	disagg := fs.String("disagg", string(cfg.Disagg), "disaggregation mode with prefill workers: never, always or auto")
	link := fs.String("link-rate", "", "prefill → decode link line rate, e.g. 1gbit, 25gbit, 100gbit (needed with --prefill-workers)")
	fs.DurationVar(&cfg.LinkRTT, "link-rtt", cfg.LinkRTT, "round-trip time added to every KV transfer")
	fs.Float64Var(&cfg.Speedup, "speedup", cfg.Speedup, "engine seconds per reported second, as up --speedup (to compare with bench against such a cluster)")
	fs.DurationVar(&cfg.TTFTSLO, "ttft-slo", cfg.TTFTSLO, "goodput SLO on time to first token")
	fs.DurationVar(&cfg.ITLSLO, "itl-slo", cfg.ITLSLO, "goodput SLO on a request's mean inter-token latency")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed for prompts and the random router")
	fs.Float64Var(&cfg.GPUHourUSD, "gpu-hour-usd", cfg.GPUHourUSD, "price of one GPU-hour, for cost per million tokens")
	fs.Float64Var(&c.minGood, "min-good", 0.9, "sweep: recommend only configurations where at least this share of requests meets the SLO")
	fs.StringVar(&c.jsonPath, "json", "", "write the report (bench's JSON schema plus a simulation object) to `FILE`; with --sweep, the ranked table; - prints it on stdout, and the tables on stderr")
	fs.StringVar(&c.plotPath, "plot", "", "write bench's plots to FILE.png and FILE-hits.png; with --sweep, one plot of the sweep")
	fs.IntVar(&cfg.Threads, "threads", cfg.Threads, "goroutines stepping workers of an aggregated cluster (1: serial, the fastest measured on 2 cores; 0: one per CPU); the report is the same for any value")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run to this file (performance work)")
	fs.StringVar(&c.compare, "compare", "", "a bench trace --json report of the same slice to set against the simulation")
	tolerance := fs.String("compare-tolerance", "15%", "with --compare, mark metrics further apart than this (15% or 0.15)")
	seeds := fs.String("seeds", "", "with --compare, simulate these seeds (1-5 or 1,2,3) and compare with their mean")
	var sweepArgs []string
	fs.Func("sweep", "a sweep dimension KEY=V1,V2 (more may follow as plain arguments)", func(s string) error {
		sweepArgs = append(sweepArgs, s)
		return nil
	})
	rest := args
	for {
		if code := parseOnly(fs, rest, env); code >= 0 {
			return c, code
		}
		rest = fs.Args()
		// Plain KEY=V arguments after --sweep are more dimensions.
		for len(rest) > 0 && len(sweepArgs) > 0 && strings.Contains(rest[0], "=") && !strings.HasPrefix(rest[0], "-") {
			sweepArgs = append(sweepArgs, rest[0])
			rest = rest[1:]
		}
		if len(rest) == 0 {
			break
		}
		if !strings.HasPrefix(rest[0], "-") {
			return c, usageError(env, "simulate", fmt.Sprintf("unexpected argument %q (sweep dimensions look like workers=4,8)", rest[0]))
		}
	}
	bad := func(format string, a ...any) (simulateCmd, int) {
		fmt.Fprintf(env.Stderr, "switchyard simulate: "+format+"\n", a...)
		return c, ExitUsage
	}
	cfg.Disagg = gate.Mode(*disagg)
	if *link != "" {
		r, err := parseLinkRate(*link)
		if err != nil {
			return bad("--link-rate: %v", err)
		}
		cfg.LinkRate = r
	}
	if cfg.TracePath == "" {
		return bad("--trace: a trace file is required, e.g. --trace traces/mooncake_synthetic_trace.jsonl")
	}
	if cfg.TraceFormat == "" {
		cfg.TraceFormat = bench.InferTraceFormat(cfg.TracePath)
	}
	if !(c.longShare >= 0 && c.longShare <= 1) || (c.longShare > 0 && c.longTokens < 1) {
		return bad("--long-share %g: want a fraction in [0, 1] with --long-tokens >= 1", c.longShare)
	}
	switch {
	case cfg.MaxRequests < 0:
		return bad("--max-requests %d: want 0 (all) or more", cfg.MaxRequests)
	case c.tile < 1:
		return bad("--tile %d: want at least 1", c.tile)
	case !(cfg.TimeScale > 0):
		return bad("--time-scale %g: want more than 0 (0.5 = twice as fast)", cfg.TimeScale)
	}
	for _, o := range [][2]string{{"--json", c.jsonPath}, {"--plot", c.plotPath}, {"--cpuprofile", c.cpuProfile}} {
		if err := checkOutput(o[0], o[1]); err != nil {
			return bad("%v", err)
		}
	}
	if c.plotPath != "" && !strings.HasSuffix(c.plotPath, ".png") {
		return bad("--plot %q: want a .png file name", c.plotPath)
	}
	var err error
	if c.sweep, err = parseSweep(sweepArgs); err != nil {
		return bad("%v", err)
	}
	if cfg.Skip < 0 {
		return bad("--skip %d: want >= 0 (0 = from the trace's start)", cfg.Skip)
	}
	if c.tolerance, err = parseTolerance(*tolerance); err != nil {
		return bad("--compare-tolerance %q: %v", *tolerance, err)
	}
	c.seeds = []int64{cfg.Seed}
	if *seeds != "" {
		if c.seeds, err = parseSeeds(*seeds); err != nil {
			return bad("--seeds %q: %v", *seeds, err)
		}
	}
	switch {
	case c.compare == "" && (*seeds != "" || flagSet(fs, "compare-tolerance")):
		return bad("--seeds and --compare-tolerance go with --compare LIVE.json")
	case c.compare != "" && len(c.sweep) > 0:
		return bad("--compare sets one configuration against a live run: not with --sweep")
	case *seeds != "" && flagSet(fs, "seed"):
		return bad("give --seed or --seeds, not both")
	case len(c.seeds) > 1 && c.longShare > 0:
		return bad("--seeds would change which requests --long-share picks; compare one --seed, the live run's")
	}
	if err := checkReadable("--trace", cfg.TracePath); err != nil {
		return bad("%v", err)
	}
	return c, -1
}

func runSimulate(ctx context.Context, args []string, env Env) int {
	c, code := parseSimulate(args, env)
	if code >= 0 {
		return code
	}
	c.jsonOut = env.Stdout
	if c.jsonPath == stdoutPath {
		env.Stdout = env.Stderr // stdout carries the JSON alone
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(env.Stderr, "switchyard simulate: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return code
	}
	reqs, err := bench.ReadTraceSlice(c.cfg.TracePath, c.cfg.TraceFormat, c.cfg.Skip, c.cfg.MaxRequests)
	if err != nil {
		return fail(ExitUsage, err)
	}
	var live *bench.Report
	if c.compare != "" {
		if live, err = bench.ReadReport(c.compare); err != nil {
			return fail(ExitUsage, fmt.Errorf("--compare: %w", err))
		}
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return fail(ExitUsage, fmt.Errorf("--cpuprofile: %w", err))
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(ExitFail, fmt.Errorf("--cpuprofile: %w", err))
		}
		defer pprof.StopCPUProfile()
	}
	reqs = bench.TileTrace(reqs, c.tile)
	c.cfg.Items = bench.TraceItems(reqs, c.cfg.TimeScale)
	if c.longShare > 0 {
		bench.ApplyLongShare(c.cfg.Items, c.longShare, c.longTokens, c.cfg.Seed)
	}
	if len(c.sweep) > 0 {
		return runSweep(ctx, c, env)
	}
	if err := c.cfg.Validate(); err != nil {
		return fail(ExitUsage, err)
	}
	c.cfg.Seed = c.seeds[0]
	rep, wall, err := simulateOnce(ctx, c.cfg, env.Stderr, "")
	if err != nil {
		return fail(ExitFail, err)
	}
	if live != nil {
		// Refused before the other seeds run: the check needs a report.
		if err := bench.Comparable(live, rep); err != nil {
			return fail(ExitUsage, fmt.Errorf("--compare %s: %w", c.compare, err))
		}
	}
	if err := bench.WriteTable(env.Stdout, rep); err != nil {
		return fail(ExitFail, err)
	}
	writeSimulation(env.Stdout, rep, wall)
	if msg := overloadWarning(rep, c.cfg.Workers); msg != "" {
		fmt.Fprintln(env.Stderr, msg)
	}
	if c.jsonPath != "" {
		if err := writeOutput(c.jsonPath, c.jsonOut, func(p string) error { return bench.WriteJSON(p, rep) }); err != nil {
			return fail(ExitFail, err)
		}
		wrote(env.Stderr, "simulate", c.jsonPath)
	}
	if c.plotPath != "" {
		if err := bench.WritePlots(c.plotPath, rep); err != nil {
			return fail(ExitFail, err)
		}
		a, b := bench.PlotPaths(c.plotPath)
		fmt.Fprintf(env.Stderr, "simulate: wrote %s and %s\n", a, b)
	}
	if live == nil {
		return ExitOK
	}
	sims := []*bench.Report{rep}
	for _, seed := range c.seeds[1:] {
		cfg := c.cfg
		cfg.Seed = seed
		r, _, err := simulateOnce(ctx, cfg, env.Stderr, fmt.Sprintf(" (seed %d)", seed))
		if err != nil {
			return fail(ExitFail, err)
		}
		sims = append(sims, r)
	}
	// A tolerance miss is a finding, not a failure: the exit stays 0.
	if err := bench.WriteComparison(env.Stdout, bench.Compare(live, sims, c.seeds, c.tolerance)); err != nil {
		return fail(ExitFail, err)
	}
	return ExitOK
}

// parseTolerance reads a relative tolerance written as a percentage
// ("15%") or a fraction ("0.15").
func parseTolerance(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	switch {
	case err != nil:
		return 0, errors.New("want a percentage such as 15% or a fraction such as 0.15")
	case strings.HasSuffix(s, "%"):
		v /= 100
	case v > 1:
		return 0, fmt.Errorf("a fraction above 1: did you mean %g%%?", v)
	}
	if !(v > 0) || math.IsInf(v, 0) {
		return 0, errors.New("want a tolerance above 0")
	}
	return v, nil
}

// maxSeeds bounds --seeds: each seed is a whole simulation.
const maxSeeds = 100

// parseSeeds reads seeds as a range "1-5" or a list "1,2,7".
func parseSeeds(s string) ([]int64, error) {
	var out []int64
	if a, b, ok := strings.Cut(s, "-"); ok && a != "" {
		lo, err1 := strconv.ParseInt(a, 10, 64)
		hi, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil || hi < lo || hi-lo >= maxSeeds {
			return nil, fmt.Errorf("want a range LO-HI of at most %d seeds, e.g. 1-5", maxSeeds)
		}
		for v := lo; v <= hi; v++ {
			out = append(out, v)
		}
		return out, nil
	}
	seen := map[int64]bool{}
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer seed (want 1-5 or 1,2,3)", f)
		}
		if seen[v] {
			return nil, fmt.Errorf("seed %d given twice", v)
		}
		seen[v] = true
		out = append(out, v)
	}
	if len(out) > maxSeeds {
		return nil, fmt.Errorf("%d seeds: at most %d", len(out), maxSeeds)
	}
	return out, nil
}

// simulateOnce runs one configuration with progress on stderr and returns
// the report and the wall time it took.
func simulateOnce(ctx context.Context, cfg simulate.Config, stderr io.Writer, label string) (*bench.Report, time.Duration, error) {
	start := time.Now()
	last := start
	cfg.Progress = func(done, total int, virtual time.Duration) {
		if now := time.Now(); now.Sub(last) >= 2*time.Second || done == total {
			last = now
			fmt.Fprintf(stderr, "simulate%s: %d/%d requests, virtual %.1f s, wall %.1f s\n", label, done, total,
				virtual.Seconds()/cfg.Speedup, now.Sub(start).Seconds())
		}
	}
	rep, err := simulate.Run(ctx, cfg)
	wall := time.Since(start)
	if err == nil {
		fmt.Fprintf(stderr, "simulate%s: %d requests in %.2f s wall (%.0f requests/s, %d events, %d engine steps)\n", label,
			rep.Runs[0].Aggregate.Requests, wall.Seconds(), float64(rep.Runs[0].Aggregate.Requests)/wall.Seconds(),
			rep.Simulation.Events, rep.Simulation.Steps)
	}
	return rep, wall, err
}

func writeSimulation(w io.Writer, rep *bench.Report, wall time.Duration) {
	s := rep.Simulation
	a := rep.Runs[0].Aggregate
	fmt.Fprintf(w, "\nsimulated cluster: %d × %s", s.Workers, s.Model)
	if s.PrefillWorkers > 0 {
		fmt.Fprintf(w, " + %d prefill workers, link %s, disagg %s", s.PrefillWorkers, s.LinkRate, s.Disagg)
	}
	fmt.Fprintf(w, " on %s (tp %d, %d GPUs, %d KV blocks each), router %s; workers %.0f%% busy\n", s.GPU, s.TP, s.GPUs, s.KVBlocks, s.Router, 100*s.Utilization)
	fmt.Fprintf(w, "goodput per GPU %.3f req/s; cost $%.4f at $%g/GPU-hour: $%.3f per million tokens ($%.3f per million output tokens)\n",
		s.GoodputPerGPU, s.CostUSD, s.GPUHourUSD, s.USDPerMillionTokens, s.USDPerMillionOutput)
	fmt.Fprintf(w, "virtual %.1f s simulated in %.2f s wall (%d requests, %.0f requests per wall second)\n",
		s.VirtualS, wall.Seconds(), a.Requests, float64(a.Requests)/wall.Seconds())
}

// overloadWarning says so when fewer than half the requests met the SLO,
// as bench trace warns before a replay the deployment cannot carry: a
// report of 0/3,993 good requests is not a capacity answer. "" otherwise.
func overloadWarning(rep *bench.Report, workers int) string {
	if rep == nil || len(rep.Runs) == 0 || rep.Simulation == nil {
		return ""
	}
	a := rep.Runs[0].Aggregate
	if a.Requests == 0 || 2*a.GoodRequests >= a.Requests {
		return ""
	}
	return fmt.Sprintf("WARNING: only %d of %d requests (%.0f%%) met the SLO (TTFT <= %gs, mean ITL <= %gs) with workers %.0f%% busy: "+
		"this cluster is too small for the trace or the SLO is out of its reach; add workers (--workers %d), slow the arrivals (--time-scale), "+
		"relax --ttft-slo/--itl-slo, or size it with --sweep workers=%d,%d,%d",
		a.GoodRequests, a.Requests, 100*float64(a.GoodRequests)/float64(a.Requests), a.TTFTSLOS, a.ITLSLOS, 100*rep.Simulation.Utilization,
		2*workers, workers, 2*workers, 4*workers)
}

type sweepDim = simulate.Dim

func parseSweep(args []string) ([]sweepDim, error) {
	var dims []sweepDim
	seen := map[string]bool{}
	for _, a := range args {
		d, err := simulate.ParseDim(a)
		if err != nil {
			return nil, err
		}
		if seen[d.Key] {
			return nil, fmt.Errorf("--sweep: %s given twice", d.Key)
		}
		seen[d.Key] = true
		dims = append(dims, d)
	}
	return dims, nil
}

func runSweep(ctx context.Context, c simulateCmd, env Env) int {
	each := func(i, n int, label string) func(done, total int, virtual time.Duration) {
		fmt.Fprintf(env.Stderr, "simulate: sweep %d/%d: %s\n", i+1, n, label)
		start := time.Now()
		last := start
		return func(done, total int, virtual time.Duration) {
			if now := time.Now(); now.Sub(last) >= 2*time.Second || done == total {
				last = now
				fmt.Fprintf(env.Stderr, "simulate:   %d/%d requests, wall %.1f s\n", done, total, now.Sub(start).Seconds())
			}
		}
	}
	start := time.Now()
	rows, reps, err := simulate.Sweep(ctx, c.cfg, c.sweep, c.minGood, each)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard simulate: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return ExitUsage
	}
	fmt.Fprintf(env.Stderr, "simulate: %d configurations in %.1f s wall\n", len(reps), time.Since(start).Seconds())
	slo := fmt.Sprintf("TTFT <= %v, mean ITL <= %v", c.cfg.TTFTSLO, c.cfg.ITLSLO)
	if err := simulate.WriteSweepTable(env.Stdout, rows, c.minGood, slo); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard simulate: %v\n", err)
		return ExitFail
	}
	if c.jsonPath != "" {
		if err := writeOutput(c.jsonPath, c.jsonOut, func(p string) error { return simulate.WriteSweepJSON(p, rows, c.sweep, c.minGood) }); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard simulate: %v\n", err)
			return ExitFail
		}
		wrote(env.Stderr, "simulate", c.jsonPath)
	}
	if c.plotPath != "" {
		if err := simulate.WriteSweepPlot(c.plotPath, c.sweep, reps); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard simulate: %v\n", err)
			return ExitFail
		}
		fmt.Fprintf(env.Stderr, "simulate: wrote %s\n", c.plotPath)
	}
	return ExitOK
}
