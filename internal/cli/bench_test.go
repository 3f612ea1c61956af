package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/bench"
)

func TestBenchUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no scenario", []string{"bench"}, "name a scenario"},
		{"unknown scenario", []string{"bench", "fast"}, "unknown scenario"},
		{"bad url", []string{"bench", "routing", "--url", "localhost"}, "--url"},
		{"trace without file", []string{"bench", "trace"}, "--trace"},
		{"bad sizes", []string{"bench", "disagg", "--prompt-tokens", "5,x"}, "--prompt-tokens"},
		{"both prefix flags", []string{"bench", "routing", "--prefix-words", "10", "--prefix-tokens", "10"}, "not both"},
		{"plot not png", []string{"bench", "routing", "--plot", "out.svg"}, ".png"},
		{"zero concurrency", []string{"bench", "routing", "--concurrency", "0"}, "--concurrency"},
		{"negative concurrency", []string{"bench", "routing", "--concurrency", "-3"}, "--concurrency -3: want at least 1"},
		{"negative trace concurrency", []string{"bench", "trace", "--trace", "t.jsonl", "--concurrency", "-3"}, "--concurrency -3"},
		{"negative warmup", []string{"bench", "routing", "--warmup", "-2"}, "--warmup -2"},
		{"concurrency not a number", []string{"bench", "routing", "--concurrency", "many"}, "not an integer"},
		// bench overload parses its own flags, to the same rules: one
		// line, and an output it could not write refused before the run.
		{"overload unknown flag", []string{"bench", "overload", "--bogus"}, "unknown flag --bogus; see `switchyard bench overload --help`"},
		{"overload json in a missing directory", []string{"bench", "overload", "--url", "http://127.0.0.1:1", "--json", "/nonexistent/o.json"}, "--json /nonexistent/o.json: directory /nonexistent does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), tt.args, nil, &out, &errb)
			if code != ExitUsage || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), ExitUsage, tt.want)
			}
		})
	}
}

// bench overload expects refusals, but a run that served nothing measured
// no deployment: exit 1, as bench does against a server that is not there.
func TestBenchOverloadUnreachableIsRuntimeFailure(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"bench", "overload", "--url", "http://127.0.0.1:1", "--duration", "200ms", "--mix", "a:standard:2"}, nil, &out, &errb)
	if code != ExitFail || !strings.Contains(errb.String(), "was served") {
		t.Errorf("exit %d, stderr %q; want %d naming that nothing was served", code, errb.String(), ExitFail)
	}
}

func TestBenchUnreachableIsRuntimeFailure(t *testing.T) {
	var out, errb bytes.Buffer
	// Port 1 on loopback refuses connections.
	code := Main(context.Background(), []string{"bench", "routing", "--url", "http://127.0.0.1:1", "--requests", "1"}, nil, &out, &errb)
	if code != ExitFail || !strings.Contains(errb.String(), "is the frontend running") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
	if !strings.HasPrefix(errb.String(), "switchyard bench: GET /health") {
		t.Errorf("stderr %q, want one prefix: switchyard bench: GET /health ...", errb.String())
	}
}

// TestNoDoubledPrefixes: a library error's package prefix is dropped where
// it repeats the command's, on every line of a joined error too.
func TestNoDoubledPrefixes(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "routing", "--url", "http://127.0.0.1:1"},
		{"bench", "routing", "--url", "bad", "--requests", "0"},
		{"preflight", "--url", "http://127.0.0.1:1"},
		{"linktest", "--url", "http://127.0.0.1:1"},
	} {
		var out, errb bytes.Buffer
		Main(context.Background(), args, nil, &out, &errb)
		if s := errb.String(); strings.Contains(s, args[0]+": "+args[0]+": ") || strings.Contains(s, "\n  "+args[0]+": ") || !strings.Contains(s, "switchyard "+args[0]+": ") {
			t.Errorf("%v: stderr %q has a doubled prefix or none", args, s)
		}
	}
}

// TestBenchHelpPrintsEachDefaultOnce: -h never shows "(default 4; ...)
// (default -1)".
func TestBenchHelpPrintsEachDefaultOnce(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"bench", "routing", "-h"}, nil, &out, &errb); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Count(line, "(default") > 1 || strings.Contains(line, "(default -1)") {
			t.Errorf("help line %q", line)
		}
	}
	for _, want := range []string{"-concurrency N", "-prefixes K", "-warmup N"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help does not show %q", want)
		}
	}
}

func TestBenchSelftestCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"bench", "selftest", "--requests", "300", "--concurrency", "8"}, nil, &out, &errb)
	if code != ExitOK || !strings.Contains(out.String(), "streamed requests/s") {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
}

// TestBenchFailsPastErrorRate: a run with failed requests fails the command
// unless --max-error-rate allows that share.
func TestBenchFailsPastErrorRate(t *testing.T) {
	rep := func(requests, ok int) *bench.Report {
		return &bench.Report{Scenario: bench.ScenarioRouting, Runs: []bench.PolicyRun{{Policy: "kv", Aggregate: bench.Aggregate{Requests: requests, OK: ok}}}}
	}
	for _, tc := range []struct {
		requests, ok int
		max          float64
		fail         bool
	}{
		{2, 2, 0, false},
		{2, 1, 0, true},
		{40, 3, 0, true},
		{40, 3, 0.5, true},
		{40, 37, 0.1, false},
		{40, 3, 1, false},
	} {
		msg := tooManyFailed(rep(tc.requests, tc.ok), tc.max)
		if (msg != "") != tc.fail {
			t.Errorf("%d/%d ok, --max-error-rate %g: %q; want failing %v", tc.ok, tc.requests, tc.max, msg, tc.fail)
		}
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"bench", "routing", "--max-error-rate", "2"}, nil, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), "--max-error-rate 2") {
		t.Errorf("--max-error-rate 2: exit %d, %q", code, errb.String())
	}
}
