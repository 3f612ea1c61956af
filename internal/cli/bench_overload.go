package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bench"
)

// runBenchOverload is `switchyard bench overload`: the closed-loop tenant
// and priority mix of docs/overload.md against any deployment.
func runBenchOverload(ctx context.Context, args []string, env Env) int {
	fs := newFlagSet("bench overload", "Closed-loop clients per tenant and priority (--mix) past capacity: per class, requests sent,\nserved, shed (with Retry-After), 5xx and abandoned, TTFT p50/p99 and the share of served tokens\n(see docs/overload.md).\n\n  switchyard bench overload --url http://127.0.0.1:8000 --keys alpha=sk-alpha,beta=sk-beta --duration 20s")
	var cfg bench.OverloadConfig
	var mix, keys, jsonPath, plotPath string
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:8000", "frontend base URL")
	fs.StringVar(&cfg.Model, "model", "qwen3-0.6b", "model name")
	fs.StringVar(&mix, "mix", bench.DefaultOverloadMix, "closed-loop streams as tenant:priority:streams,...")
	fs.StringVar(&keys, "keys", "", "each tenant's API key, tenant=key,... (a tenant without one sends no Authorization)")
	fs.DurationVar(&cfg.Duration, "duration", 20*time.Second, "how long the clients send")
	fs.IntVar(&cfg.PromptWords, "prompt-words", 200, "words per prompt (unique prompts)")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", 64, "completion tokens per request")
	fs.BoolVar(&cfg.HonorRetryAfter, "honor-retry-after", true, "a refused client waits Retry-After before its next request (false: 50 ms)")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "per-request timeout")
	fs.Int64Var(&cfg.Seed, "seed", 1, "seed of the prompts")
	fs.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file (- for stdout instead of the table)")
	fs.StringVar(&plotPath, "plot", "", "also write bar charts of each class's outcomes (PNG) and, with -ttft before .png, their TTFT")
	if code := parseFlags(fs, args, env); code >= 0 {
		return code
	}
	cfg.URL = frontendURL(cfg.URL)
	for _, o := range []struct{ flag, path string }{{"--json", jsonPath}, {"--plot", plotPath}} {
		if err := checkOutput(o.flag, o.path); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard bench overload: %v\n", err)
			return ExitUsage
		}
	}
	var err error
	if cfg.Mix, err = bench.ParseOverloadMix(mix, keys); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard bench overload: %v\n", err)
		return ExitUsage
	}
	if cfg.Duration <= 0 || cfg.MaxTokens <= 0 || cfg.PromptWords <= 0 {
		fmt.Fprintln(env.Stderr, "switchyard bench overload: --duration, --max-tokens and --prompt-words must be positive")
		return ExitUsage
	}
	rep, err := bench.RunOverload(ctx, cfg, env.Stderr)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard bench overload: %v\n", err)
		return ExitFail
	}
	if plotPath != "" {
		if err := bench.WriteOverloadPlots(plotPath, rep); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard bench overload: --plot: %v\n", err)
			return ExitFail
		}
		a, b := bench.OverloadPlotPaths(plotPath)
		fmt.Fprintf(env.Stderr, "bench: wrote %s and %s\n", a, b)
	}
	if jsonPath == "-" {
		if err := bench.WriteOverloadJSON(env.Stdout, rep); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard bench overload: %v\n", err)
			return ExitFail
		}
		return overloadVerdict(rep, env)
	}
	if err := bench.WriteOverloadTable(env.Stdout, rep); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard bench overload: %v\n", err)
		return ExitFail
	}
	if jsonPath != "" {
		f, err := os.Create(jsonPath)
		if err == nil {
			err = bench.WriteOverloadJSON(f, rep)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			fmt.Fprintf(env.Stderr, "switchyard bench overload: --json: %v\n", err)
			return ExitFail
		}
		fmt.Fprintf(env.Stderr, "bench: wrote %s\n", jsonPath)
	}
	return overloadVerdict(rep, env)
}

// overloadVerdict fails a run in which nothing was served: shedding is what
// an overload run expects, but a run whose every request failed measured no
// deployment (none there, or every answer an error).
func overloadVerdict(rep *bench.OverloadReport, env Env) int {
	sent, served := 0, 0
	for _, c := range rep.Classes {
		sent, served = sent+c.Sent, served+c.Served
	}
	if served == 0 {
		fmt.Fprintf(env.Stderr, "switchyard bench overload: none of %d requests was served; is a frontend answering at %s?\n", sent, rep.URL)
		return ExitFail
	}
	return ExitOK
}
