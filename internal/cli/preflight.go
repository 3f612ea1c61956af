package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/preflight"
)

func init() {
	register(command{name: "preflight", summary: "go-live checklist against a running frontend; exit 1 if a check fails", run: runPreflight})
}

const preflightUsage = `usage: switchyard preflight --url http://FRONTEND [--json FILE|-] [--markdown FILE] [--prompt-tokens 1500,3000,...]

Checks a live deployment: inventory, KV events per worker, same-prefix cache
probe, routing hit ratio, prefill→decode links and the disaggregation math.
Each check is PASS, SKIP (nothing to examine), WARN or FAIL with its numbers. Progress goes to stderr,
the report to stdout as a table (--json - prints JSON there instead; schema in
docs/preflight-schema.md). Exit code 0 when nothing fails, 1 when a check
fails or the frontend cannot be examined, 2 for usage errors.

Example (the field report's 3,000-word prompt is about 3,200 tokens):

  switchyard preflight --url http://127.0.0.1:8000 --prompt-tokens 1500,3200,6000 --markdown preflight.md

`

// parsePreflight turns the command line into a validated preflight.Config
// plus the output choices. It returns an exit code, -1 to go on.
func parsePreflight(args []string, env Env) (cfg preflight.Config, jsonPath, mdPath string, code int) {
	cfg = preflight.DefaultConfig()
	fs := flag.NewFlagSet("preflight", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), preflightUsage)
		printFlags(fs.Output(), fs)
	}
	fs.StringVar(&cfg.URL, "url", cfg.URL, "frontend base URL (a client's .../v1 is accepted)")
	fs.StringVar(&cfg.Model, "model", "", "the model to check, for a frontend that serves several (its workers only; run once per model)")
	fs.StringVar(&cfg.APIKey, "api-key", "", "API key sent as Authorization: Bearer on /v1/* requests (default: $"+envAPIKey+")")
	fs.StringVar(&cfg.AdminKey, "admin-key", "", "admin key for /admin/* and pinned probes (default: $"+envAdminKey+", else --api-key)")
	fs.StringVar(&jsonPath, "json", "", "write the report as JSON to `FILE`; - prints it on stdout instead of the table")
	fs.StringVar(&mdPath, "markdown", "", "also write the report as Markdown to this file")
	promptTokens := fs.String("prompt-tokens", "1500,3000,6000", "prompt lengths for the disaggregation math")
	fs.Float64Var(&cfg.MinHitRatio, "min-hit-ratio", cfg.MinHitRatio, "routing check fails below this hit ratio (warns below 1.0)")
	fs.Int64Var(&cfg.ProbeBytes, "probe-bytes", cfg.ProbeBytes, "bytes per link probe")
	fs.IntVar(&cfg.ProbeTokens, "probe-tokens", cfg.ProbeTokens, "prompt length of the same-prefix TTFT probe")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per-request timeout")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed for probe prompts (0 = new prompts every run)")
	if code := parseFlags(fs, args, env); code >= 0 {
		return cfg, "", "", code
	}
	cfg.URL = frontendURL(cfg.URL)
	keysFromEnv(&cfg.APIKey, &cfg.AdminKey, os.Getenv)
	var err error
	if cfg.PromptTokens, err = parseInts(*promptTokens); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard preflight: --prompt-tokens %q: %v (want e.g. 1500,3000,6000)\n", *promptTokens, err)
		return cfg, "", "", ExitUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard preflight: %v\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return cfg, "", "", ExitUsage
	}
	for _, o := range [][2]string{{"--json", jsonPath}, {"--markdown", mdPath}} {
		if err := checkOutput(o[0], o[1]); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard preflight: %v\n", err)
			return cfg, "", "", ExitUsage
		}
	}
	if mdPath == stdoutPath {
		fmt.Fprintln(env.Stderr, "switchyard preflight: --markdown -: want a file name; the table is already on stdout")
		return cfg, "", "", ExitUsage
	}
	return cfg, jsonPath, mdPath, -1
}

func runPreflight(ctx context.Context, args []string, env Env) int {
	cfg, jsonPath, mdPath, code := parsePreflight(args, env)
	if code >= 0 {
		return code
	}
	if cfg.Model == "" {
		models, err := preflight.FleetModels(ctx, cfg)
		if err != nil {
			fmt.Fprintf(env.Stderr, "switchyard preflight: %v\n", err)
			return ExitFail
		}
		if len(models) > 0 {
			return preflightFleet(ctx, cfg, models, jsonPath, mdPath, env)
		}
	}
	rep, err := preflight.Run(ctx, cfg, env.Stderr)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard preflight: %v\n", err)
		return ExitFail
	}
	if jsonPath == stdoutPath {
		err = preflight.WriteJSON(env.Stdout, rep)
	} else {
		err = preflight.WriteTable(env.Stdout, rep)
	}
	if jsonPath != "" && jsonPath != stdoutPath {
		if werr := writeJSONFile(jsonPath, rep); werr != nil {
			err = errors.Join(err, werr)
		} else {
			wrote(env.Stderr, "preflight", jsonPath)
		}
	}
	if mdPath != "" {
		if werr := writeMarkdown(mdPath, rep); werr != nil {
			err = errors.Join(err, werr)
		} else {
			fmt.Fprintf(env.Stderr, "preflight: wrote %s\n", mdPath)
		}
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard preflight: %v\n", err)
		return ExitFail
	}
	fmt.Fprintf(env.Stderr, "preflight: %s\n", rep.Verdict)
	if rep.Failed() {
		return ExitFail
	}
	return ExitOK
}

func writeJSONFile(path string, rep *preflight.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	werr := preflight.WriteJSON(f, rep)
	if cerr := f.Close(); werr == nil && cerr != nil {
		werr = fmt.Errorf("--json: %w", cerr)
	}
	return werr
}

func writeMarkdown(path string, rep *preflight.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--markdown: %w", err)
	}
	werr := preflight.WriteMarkdown(f, rep)
	if cerr := f.Close(); werr == nil && cerr != nil {
		werr = fmt.Errorf("--markdown: %w", cerr)
	}
	return werr
}

// preflightFleet checks each model of a frontend that serves several, one
// after another, printing each report; it fails if any model fails.
// Reports to files are one per run, so --json and --markdown then need
// --model.
func preflightFleet(ctx context.Context, cfg preflight.Config, models []string, jsonPath, mdPath string, env Env) int {
	if jsonPath != "" || mdPath != "" {
		fmt.Fprintf(env.Stderr, "switchyard preflight: the frontend serves %d models (%s): with --json or --markdown, check one with --model NAME\n", len(models), strings.Join(models, ", "))
		return ExitUsage
	}
	code := ExitOK
	for _, m := range models {
		cfg.Model = m
		fmt.Fprintf(env.Stderr, "preflight: model %s\n", m)
		rep, err := preflight.Run(ctx, cfg, env.Stderr)
		if err != nil {
			fmt.Fprintf(env.Stderr, "switchyard preflight: model %s: %v\n", m, err)
			return ExitFail
		}
		fmt.Fprintf(env.Stdout, "model %s\n", m)
		if err := preflight.WriteTable(env.Stdout, rep); err != nil {
			fmt.Fprintf(env.Stderr, "switchyard preflight: %v\n", err)
			return ExitFail
		}
		fmt.Fprintf(env.Stderr, "preflight: model %s: %s\n", m, rep.Verdict)
		if rep.Failed() {
			code = ExitFail
		}
	}
	return code
}
