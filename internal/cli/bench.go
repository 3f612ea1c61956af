package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/bench"
)

func init() {
	register(command{name: "bench", summary: "load-test a deployment: routing, disagg, trace or selftest", run: runBench})
}

const benchUsage = `usage: switchyard bench <routing|disagg|trace|selftest> [flags]

  routing   N requests over K shared prefixes (+ unique suffixes) after a warm-up
  disagg    prompt-size sweep, one request at a time, unique prompts
  trace     replay a Mooncake (JSONL) or Azure (CSV) trace's arrivals and lengths
  selftest  drive an in-process trivial SSE server to measure bench itself
  overload  closed-loop tenants and priorities past capacity: served, shed, TTFT, token shares

`

// parseBench turns the command line into a validated bench.Config plus the
// output paths. It writes usage errors to stderr and returns an exit code
// (-1 to go on).
func parseBench(args []string, env Env) (cfg bench.Config, jsonPath, plotPath string, code int) {
	cfg, jsonPath, plotPath, _, code = parseBenchCmd(args, env)
	return cfg, jsonPath, plotPath, code
}

// parseBenchCmd is parseBench with the exit threshold.
func parseBenchCmd(args []string, env Env) (cfg bench.Config, jsonPath, plotPath string, maxErrorRate float64, code int) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprint(env.Stdout, benchUsage)
			fmt.Fprintln(env.Stdout, "Run 'switchyard bench SCENARIO --help' for a scenario's flags.")
			return cfg, "", "", 0, ExitOK
		}
		return cfg, "", "", 0, usageError(env, "bench", "name a scenario first: routing, disagg, trace or selftest (e.g. 'switchyard bench routing --url http://127.0.0.1:8000')")
	}
	cfg = bench.DefaultConfig()
	cfg.Scenario = bench.Scenario(args[0])
	scenarioHelp, known := benchScenarios[cfg.Scenario]
	if !known {
		return cfg, "", "", 0, usageError(env, "bench", fmt.Sprintf("unknown scenario %q: want routing, disagg, trace or selftest", args[0]))
	}
	all := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	fs := all
	var concurrency, prefixes, warmup optInt
	all.StringVar(&cfg.URL, "url", cfg.URL, "frontend base URL; several separated by commas spread requests round-robin (a refusing one is skipped)")
	all.StringVar(&cfg.Model, "model", "", "model name (default: first id of GET /v1/models), or a mix each request draws from: a:0.7,b:0.3")
	all.StringVar(&cfg.APIKey, "api-key", "", "API key sent as Authorization: Bearer")
	all.StringVar(&cfg.API, "api", bench.APICompletions, "endpoint to drive: completions (prompts as token IDs), chat, messages (Anthropic) or responses (OpenAI Responses), prompts as text")
	all.StringVar(&cfg.AdminKey, "admin-key", "", "admin key for /admin/* (default: --api-key)")
	all.IntVar(&cfg.Requests, "requests", cfg.Requests, "measured requests (routing, selftest)")
	all.Var(&prefixes, "prefixes", "`K` shared prefixes (routing; default: enough that they need 1.5× one worker's KV cache, from /health)")
	all.IntVar(&cfg.PrefixTokens, "prefix-tokens", cfg.PrefixTokens, "prefix length in random token IDs (routing)")
	all.IntVar(&cfg.PrefixWords, "prefix-words", 0, "prefix length in English words; overrides --prefix-tokens (routing)")
	all.IntVar(&cfg.SuffixTokens, "suffix-tokens", cfg.SuffixTokens, "unique suffix per request (routing)")
	all.Var(&warmup, "warmup", "`N` warm-up requests, excluded from results (routing; default one per prefix)")
	promptTokens := all.String("prompt-tokens", "500,1500,3000", "prompt sizes to sweep (disagg)")
	all.IntVar(&cfg.Repeats, "repeats", cfg.Repeats, "requests per prompt size (disagg)")
	all.StringVar(&cfg.TracePath, "trace", "", "trace file (trace)")
	all.StringVar(&cfg.TraceFormat, "format", "", "trace format: mooncake or azure (trace; default: azure for a .csv file, else mooncake)")
	all.Float64Var(&cfg.TimeScale, "time-scale", cfg.TimeScale, "multiply trace timestamps by this (0.5 = twice as fast)")
	all.IntVar(&cfg.Skip, "skip", 0, "skip the trace's first N requests; the slice's first arrives at 0 (trace)")
	all.IntVar(&cfg.MaxRequests, "max-requests", 0, "replay at most this many trace requests after --skip (0 = all)")
	all.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "completion tokens per request (routing, disagg, selftest)")
	all.Var(&concurrency, "concurrency", "at most `N` requests in flight (default 4; selftest 64; trace 0 = unlimited)")
	all.Float64Var(&cfg.Rate, "rate", 0, "Poisson arrival rate in requests/s (0 = as fast as --concurrency allows)")
	all.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed for every random choice")
	all.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per-request timeout")
	policies := all.String("compare-policies", "", "comma-separated router policies to compare, e.g. kv,round-robin,random")
	modes := all.String("compare-disagg", "", "comma-separated disaggregation modes to compare via PUT /admin/disagg, e.g. never,always,auto")
	all.Float64Var(&cfg.LongShare, "long-share", 0, "trace: give this share of requests (chosen by --seed) --long-tokens input tokens and a unique prompt")
	all.IntVar(&cfg.LongTokens, "long-tokens", 4000, "trace: input length of the requests --long-share picks")
	all.BoolVar(&cfg.ResetCache, "reset-cache", false, "reset worker prefix caches before the run (always on with --compare-policies or --compare-disagg)")
	all.IntVar(&cfg.BlockSize, "block-size", 0, "KV block size for the hit count (default: from /health, else 16)")
	all.DurationVar(&cfg.TTFTSLO, "ttft-slo", cfg.TTFTSLO, "goodput SLO on time to first token")
	all.DurationVar(&cfg.ITLSLO, "itl-slo", cfg.ITLSLO, "goodput SLO on a request's mean inter-token latency")
	all.Float64Var(&maxErrorRate, "max-error-rate", 0, "exit 1 when more than this share of a run's requests failed or were rejected (0: any failure fails the command; 1: never)")
	all.StringVar(&jsonPath, "json", "", "write per-request records and aggregates as JSON to `FILE`; - prints them on stdout, and the table on stderr")
	all.StringVar(&plotPath, "plot", "", "write the TTFT CDF to FILE.png and the hit ratio over time to FILE-hits.png (disagg: TTFT by prompt size to FILE-sizes.png)")
	// Each scenario takes only the flags it uses: one that would be
	// silently ignored is refused, and --help lists only what applies.
	fs = flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	all.VisitAll(func(f *flag.Flag) {
		if benchFlagApplies(f.Name, cfg.Scenario) {
			fs.Var(f.Value, f.Name, f.Usage)
			fs.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: switchyard bench %s [flags]\n\n%s\n\nflags:\n", cfg.Scenario, scenarioHelp)
		printFlags(fs.Output(), fs)
	}
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && fs.Lookup(name) == nil && all.Lookup(name) != nil {
			return cfg, "", "", 0, usageError(env, fs.Name(), fmt.Sprintf("--%s does not apply to the %s scenario (it is for: %s)", name, cfg.Scenario, benchFlagScenarios(name)))
		}
		if a == "--" {
			break
		}
	}
	if code := parseFlags(fs, args[1:], env); code >= 0 {
		return cfg, "", "", 0, code
	}
	if cfg.Scenario == bench.ScenarioSelftest {
		if !flagSet(fs, "requests") {
			cfg.Requests = 20000
		}
		if !flagSet(fs, "max-tokens") {
			cfg.MaxTokens = 4
		}
		cfg.Prefixes, cfg.PrefixTokens, cfg.SuffixTokens, cfg.Warmup = 4, 64, 8, 0
	}
	if prefixes.set {
		cfg.Prefixes = prefixes.v
	}
	if warmup.set {
		cfg.Warmup = warmup.v
		if cfg.Warmup < 0 {
			fmt.Fprintf(env.Stderr, "switchyard bench: --warmup %d: want 0 or more\n", cfg.Warmup)
			return cfg, "", "", 0, ExitUsage
		}
	}
	switch {
	case concurrency.set:
		cfg.Concurrency = concurrency.v // Validate rejects a negative one
	case cfg.Scenario == bench.ScenarioTrace:
		cfg.Concurrency = 0
	case cfg.Scenario == bench.ScenarioSelftest:
		cfg.Concurrency = 64
	}
	cfg.AutoPrefixes = cfg.Scenario == bench.ScenarioRouting && !prefixes.set
	if flagSet(fs, "prefix-words") && flagSet(fs, "prefix-tokens") {
		fmt.Fprintln(env.Stderr, "switchyard bench: give --prefix-words or --prefix-tokens, not both")
		return cfg, "", "", 0, ExitUsage
	}
	if !(maxErrorRate >= 0 && maxErrorRate <= 1) {
		return cfg, "", "", 0, usageError(env, fs.Name(), fmt.Sprintf("--max-error-rate %g: want a share in [0, 1]", maxErrorRate))
	}
	cfg.URL = frontendURL(cfg.URL)
	keysFromEnv(&cfg.APIKey, &cfg.AdminKey, os.Getenv)
	var err error
	if cfg.PromptTokens, err = parseInts(*promptTokens); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard bench: --prompt-tokens %q: %v (want e.g. 500,1500,3000)\n", *promptTokens, err)
		return cfg, "", "", 0, ExitUsage
	}
	if *policies != "" {
		cfg.Policies = strings.Split(*policies, ",")
		for i := range cfg.Policies {
			cfg.Policies[i] = strings.TrimSpace(cfg.Policies[i])
		}
	}
	if *modes != "" {
		cfg.DisaggModes = splitList(*modes)
		if len(cfg.DisaggModes) == 0 {
			cfg.DisaggModes = []string{""} // Validate names the flag
		}
	}
	for _, o := range [][2]string{{"--json", jsonPath}, {"--plot", plotPath}} {
		if err := checkOutput(o[0], o[1]); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard bench: %v\n", err)
			return cfg, "", "", 0, ExitUsage
		}
	}
	if plotPath != "" && !strings.HasSuffix(plotPath, ".png") {
		fmt.Fprintf(env.Stderr, "switchyard bench: --plot %q: want a .png file name\n", plotPath)
		return cfg, "", "", 0, ExitUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard bench: %v\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return cfg, "", "", 0, ExitUsage
	}
	if cfg.Scenario == bench.ScenarioTrace {
		if err := checkReadable("--trace", cfg.TracePath); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard bench: %v\n", err)
			return cfg, "", "", 0, ExitUsage
		}
	}
	return cfg, jsonPath, plotPath, maxErrorRate, -1
}

// benchScenarios describes each scenario in its --help.
var benchScenarios = map[bench.Scenario]string{
	bench.ScenarioRouting:  "N requests over K shared prefixes (+ unique suffixes) after a warm-up: the prefix-cache hit ratio\nand TTFT a routing policy reaches.\n\n  switchyard bench routing --url http://127.0.0.1:8000 --compare-policies kv,round-robin",
	bench.ScenarioDisagg:   "A prompt-size sweep, one request at a time, unique prompts: TTFT by prompt size, for deciding\nwhether disaggregated prefill pays.\n\n  switchyard bench disagg --url http://127.0.0.1:8000 --compare-disagg never,always,auto",
	bench.ScenarioTrace:    "Replays a Mooncake (JSONL) or Azure (CSV) trace's arrivals and lengths against a deployment.\n\n  switchyard bench trace --url http://127.0.0.1:8000 --trace FILE --max-requests 400",
	bench.ScenarioSelftest: "Drives an in-process trivial SSE server, to measure bench itself: the request rate it sustains\nbounds what it can measure.\n\n  switchyard bench selftest",
}

// benchFlagOnly names the scenarios of the flags that not every scenario
// takes; the others apply to all.
var benchFlagOnly = map[string][]bench.Scenario{}

func init() {
	live := []bench.Scenario{bench.ScenarioRouting, bench.ScenarioDisagg, bench.ScenarioTrace}
	for _, n := range []string{"url", "model", "api", "api-key", "admin-key", "compare-policies", "compare-disagg", "reset-cache", "block-size"} {
		benchFlagOnly[n] = live
	}
	for _, n := range []string{"prefixes", "prefix-tokens", "prefix-words", "suffix-tokens", "warmup"} {
		benchFlagOnly[n] = []bench.Scenario{bench.ScenarioRouting}
	}
	for _, n := range []string{"prompt-tokens", "repeats"} {
		benchFlagOnly[n] = []bench.Scenario{bench.ScenarioDisagg}
	}
	for _, n := range []string{"trace", "format", "time-scale", "skip", "max-requests", "long-share", "long-tokens"} {
		benchFlagOnly[n] = []bench.Scenario{bench.ScenarioTrace}
	}
	benchFlagOnly["requests"] = []bench.Scenario{bench.ScenarioRouting, bench.ScenarioSelftest}
	benchFlagOnly["max-tokens"] = []bench.Scenario{bench.ScenarioRouting, bench.ScenarioDisagg, bench.ScenarioSelftest}
	benchFlagOnly["rate"] = []bench.Scenario{bench.ScenarioRouting, bench.ScenarioDisagg, bench.ScenarioSelftest}
}

func benchFlagApplies(name string, s bench.Scenario) bool {
	only, ok := benchFlagOnly[name]
	return !ok || slices.Contains(only, s)
}

func benchFlagScenarios(name string) string {
	var out []string
	for _, s := range benchFlagOnly[name] {
		out = append(out, string(s))
	}
	return strings.Join(out, ", ")
}

// checkReadable fails fast on an input file that cannot be opened, naming
// its flag, before a run starts.
func checkReadable(flagName, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	return f.Close()
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func runBench(ctx context.Context, args []string, env Env) int {
	if len(args) > 0 && args[0] == "overload" {
		return runBenchOverload(ctx, args[1:], env)
	}
	cfg, jsonPath, plotPath, maxErrorRate, code := parseBenchCmd(args, env)
	if code >= 0 {
		return code
	}
	jsonOut := env.Stdout
	if jsonPath == stdoutPath {
		env.Stdout = env.Stderr // stdout carries the JSON alone
	}
	progress := bench.NewProgress(env.Stderr, isTerminal(env.Stderr))
	var rep *bench.Report
	var err error
	if cfg.Scenario == bench.ScenarioSelftest {
		rep, err = bench.Selftest(ctx, cfg, progress)
	} else {
		rep, err = bench.Run(ctx, cfg, progress)
	}
	if rep != nil && len(rep.Runs) > 0 {
		if werr := bench.WriteTable(env.Stdout, rep); werr != nil {
			err = errors.Join(err, werr)
		}
		if cfg.Scenario == bench.ScenarioSelftest {
			fmt.Fprintf(env.Stdout, "\nselftest: bench sustained %.0f streamed requests/s (%d chunks each, concurrency %d) against an in-process trivial server\n",
				rep.Runs[0].Aggregate.RequestsPerS, cfg.MaxTokens, cfg.Concurrency)
		}
		if jsonPath != "" {
			if werr := writeOutput(jsonPath, jsonOut, func(p string) error { return bench.WriteJSON(p, rep) }); werr != nil {
				err = errors.Join(err, werr)
			} else {
				wrote(env.Stderr, "bench", jsonPath)
			}
		}
		if plotPath != "" {
			if werr := bench.WritePlots(plotPath, rep); werr != nil {
				err = errors.Join(err, werr)
			} else {
				fmt.Fprintf(env.Stderr, "bench: wrote %s\n", strings.Join(bench.PlotFiles(plotPath, rep), " and "))
			}
		}
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard bench: %v\n", err)
		return ExitFail
	}
	if msg := tooManyFailed(rep, maxErrorRate); msg != "" {
		fmt.Fprintf(env.Stderr, "switchyard bench: %s\n", msg)
		return ExitFail
	}
	return ExitOK
}

// tooManyFailed says which run's failed and rejected requests exceed
// maxErrorRate of its requests, or "" when none does: a load test whose
// requests failed has not measured what it was asked to, and a script
// running it must see that in the exit code.
func tooManyFailed(rep *bench.Report, maxErrorRate float64) string {
	if rep == nil {
		return ""
	}
	for _, r := range rep.Runs {
		a := r.Aggregate
		failed := a.Requests - a.OK
		if a.Requests == 0 || failed == 0 || float64(failed) <= maxErrorRate*float64(a.Requests) {
			continue
		}
		name := r.Policy
		if r.DisaggMode != "" {
			name = strings.TrimSpace(name + " disagg " + r.DisaggMode)
		}
		if name == "" {
			name = string(rep.Scenario)
		}
		return fmt.Sprintf("%d of %d requests failed or were rejected in run %s (%.1f%%), above --max-error-rate %g; see the errors by kind above",
			failed, a.Requests, name, 100*float64(failed)/float64(a.Requests), maxErrorRate)
	}
	return ""
}

// isTerminal reports whether w is a character device (a TTY), without
// pulling in a terminal library.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// optInt is an integer flag whose default is described in its usage text
// rather than printed by -h ("(default -1)" next to "(default 4; ...)"),
// and which knows whether it was given.
type optInt struct {
	v   int
	set bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.v)
}

func (o *optInt) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	o.v, o.set = v, true
	return nil
}
