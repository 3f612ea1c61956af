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

const preflightUsage = `usage: switchyard preflight --url http://FRONTEND [--json] [--markdown FILE] [--prompt-tokens 1500,3000,...]

Checks a live deployment: inventory, KV events per worker, same-prefix cache
probe, routing hit ratio, prefill→decode links and the disaggregation math.
Each check is PASS, WARN or FAIL with its numbers. Progress goes to stderr,
the report to stdout (a table, or JSON with --json; schema in
docs/preflight-schema.md). Exit code 0 when nothing fails, 1 when a check
fails or the frontend cannot be examined, 2 for usage errors.

Example (the field report's 3,000-word prompt is about 3,200 tokens):

  switchyard preflight --url http://127.0.0.1:8000 --prompt-tokens 1500,3200,6000 --markdown preflight.md

`

// parsePreflight turns the command line into a validated preflight.Config
// plus the output choices. It returns an exit code, -1 to go on.
func parsePreflight(args []string, env Env) (cfg preflight.Config, asJSON bool, mdPath string, code int) {
	cfg = preflight.DefaultConfig()
	fs := flag.NewFlagSet("preflight", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), preflightUsage)
		printFlags(fs.Output(), fs)
	}
	fs.StringVar(&cfg.URL, "url", cfg.URL, "frontend base URL")
	fs.StringVar(&cfg.APIKey, "api-key", "", "API key sent as Authorization: Bearer on /v1/* requests")
	fs.StringVar(&cfg.AdminKey, "admin-key", "", "admin key for /admin/* and pinned probes (default: --api-key)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON on stdout instead of the table")
	fs.StringVar(&mdPath, "markdown", "", "also write the report as Markdown to this file")
	promptTokens := fs.String("prompt-tokens", "1500,3000,6000", "prompt lengths for the disaggregation math")
	fs.Float64Var(&cfg.MinHitRatio, "min-hit-ratio", cfg.MinHitRatio, "routing check fails below this hit ratio (warns below 1.0)")
	fs.Int64Var(&cfg.ProbeBytes, "probe-bytes", cfg.ProbeBytes, "bytes per link probe")
	fs.IntVar(&cfg.ProbeTokens, "probe-tokens", cfg.ProbeTokens, "prompt length of the same-prefix TTFT probe")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per-request timeout")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed for probe prompts (0 = new prompts every run)")
	if code := parseFlags(fs, args, env); code >= 0 {
		return cfg, false, "", code
	}
	var err error
	if cfg.PromptTokens, err = parseInts(*promptTokens); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard preflight: --prompt-tokens %q: %v (want e.g. 1500,3000,6000)\n", *promptTokens, err)
		return cfg, false, "", ExitUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard preflight: %v\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return cfg, false, "", ExitUsage
	}
	return cfg, asJSON, mdPath, -1
}

func runPreflight(ctx context.Context, args []string, env Env) int {
	cfg, asJSON, mdPath, code := parsePreflight(args, env)
	if code >= 0 {
		return code
	}
	rep, err := preflight.Run(ctx, cfg, env.Stderr)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard preflight: %v\n", err)
		return ExitFail
	}
	if asJSON {
		err = preflight.WriteJSON(env.Stdout, rep)
	} else {
		err = preflight.WriteTable(env.Stdout, rep)
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
