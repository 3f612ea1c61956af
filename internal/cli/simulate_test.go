package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const simTrace = "../../../shared/data/traces/mooncake_synthetic_trace.jsonl"

// TestSimulateBadInput: a malformed trace names its line, and an impossible
// cluster is refused with exit 2 before anything runs.
func TestSimulateBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	good := `{"timestamp": 0, "input_length": 20, "output_length": 4, "hash_ids": [1]}`
	if err := os.WriteFile(bad, []byte(good+"\n"+good+"\n{\"timestamp\": 5, \"input_length\": 20,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"malformed line", []string{"--trace", bad}, "line 3"},
		{"no trace", []string{"--workers", "2"}, "--trace"},
		{"zero workers", []string{"--trace", simTrace, "--workers", "0"}, "--workers 0"},
		{"model larger than gpu", []string{"--trace", simTrace, "--model", "llama-3.1-70b", "--gpu", "rtx-4060"}, "does not fit on 8 × rtx-4060"},
		{"prefill without link", []string{"--trace", simTrace, "--prefill-workers", "1"}, "--link-rate"},
		{"bad link", []string{"--trace", simTrace, "--prefill-workers", "1", "--link-rate", "fast"}, "--link-rate"},
		{"bad sweep key", []string{"--trace", simTrace, "--sweep", "gpus=1,2"}, "sweep key"},
		{"stray argument", []string{"--trace", simTrace, "now"}, "unexpected argument"},
		{"bad format", []string{"--trace", simTrace, "--format", "csv"}, "mooncake or azure"},
		{"negative skip", []string{"--trace", simTrace, "--skip", "-1"}, "--skip -1: want >= 0"},
		{"skip past the end", []string{"--trace", simTrace, "--skip", "3993"}, "--skip 3993: the trace has only 3993 requests"},
		{"bad seeds", []string{"--trace", simTrace, "--compare", "x.json", "--seeds", "5-1"}, "--seeds \"5-1\""},
		{"seed and seeds", []string{"--trace", simTrace, "--compare", "x.json", "--seeds", "1-3", "--seed", "2"}, "--seed or --seeds"},
		{"seeds without compare", []string{"--trace", simTrace, "--seeds", "1-3"}, "go with --compare"},
		{"tolerance as a bare number", []string{"--trace", simTrace, "--compare", "x.json", "--compare-tolerance", "15"}, "did you mean 15%?"},
		{"zero tolerance", []string{"--trace", simTrace, "--compare", "x.json", "--compare-tolerance", "0%"}, "above 0"},
		{"compare with sweep", []string{"--trace", simTrace, "--compare", "x.json", "--sweep", "workers=1,2"}, "not with --sweep"},
		{"compare a missing report", []string{"--trace", simTrace, "--compare", filepath.Join(dir, "none.json")}, "--compare: read report"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), append([]string{"simulate"}, tt.args...), nil, &out, &errb)
			if code != ExitUsage || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, errb.String(), ExitUsage, tt.want)
			}
			if out.Len() > 0 {
				t.Errorf("%v: wrote a report despite the error:\n%s", tt.args, out.String())
			}
		})
	}
}

func TestSimulateCommand(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "sim.json")
	var out, errb bytes.Buffer
	args := []string{"simulate", "--trace", simTrace, "--max-requests", "60", "--workers", "2", "--prefill-workers", "1",
		"--link-rate", "10gbit", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpu-hour-usd", "3", "--json", js}
	if code := Main(context.Background(), args, nil, &out, &errb); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"TTFT p50/p90/p99 ms", "prefill local/remote", "per million tokens", "3 GPUs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errb.String(), "60/60 requests") {
		t.Errorf("no progress on stderr: %q", errb.String())
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Schema     string
		Runs       []map[string]any
		Simulation struct {
			GPUs    int     `json:"gpus"`
			CostUSD float64 `json:"cost_usd"`
		}
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Schema != "switchyard-bench/v1" || len(rep.Runs) != 1 || rep.Simulation.GPUs != 3 || rep.Simulation.CostUSD <= 0 {
		t.Errorf("report: schema %q, %d runs, simulation %+v", rep.Schema, len(rep.Runs), rep.Simulation)
	}

	out.Reset()
	errb.Reset()
	args = []string{"simulate", "--trace", simTrace, "--max-requests", "60", "--model", "llama-3.1-8b", "--gpu", "h100",
		"--sweep", "workers=1,2", "router=kv,round-robin"}
	if code := Main(context.Background(), args, nil, &out, &errb); code != ExitOK {
		t.Fatalf("sweep: exit %d: %s", code, errb.String())
	}
	if n := strings.Count(out.String(), "workers="); n != 4+1 && n != 4 {
		t.Errorf("sweep table has %d configurations, want 4:\n%s", n, out.String())
	}
}

// TestSimulateCompare: a simulation compared with its own report agrees to
// the last digit on every metric; a report of another slice or SLO is
// refused, naming the difference, before anything is printed.
func TestSimulateCompare(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.json")
	args := []string{"simulate", "--trace", simTrace, "--skip", "3000", "--max-requests", "40", "--workers", "2",
		"--model", "llama-3.1-8b", "--gpu", "h100"}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), append(args, "--json", base), nil, &out, &errb); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Settings struct {
			Skip        int `json:"skip"`
			MaxRequests int `json:"max_requests"`
		}
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Settings.Skip != 3000 || rep.Settings.MaxRequests != 40 {
		t.Errorf("settings echo skip %d, max_requests %d; want 3000, 40", rep.Settings.Skip, rep.Settings.MaxRequests)
	}

	out.Reset()
	errb.Reset()
	if code := Main(context.Background(), append(args, "--compare", base), nil, &out, &errb); code != ExitOK {
		t.Fatalf("compare: exit %d: %s", code, errb.String())
	}
	table := out.String()[strings.Index(out.String(), "live vs simulated"):]
	if n := strings.Count(table, "+0.0%"); n != 4 || strings.Contains(table, "*") {
		t.Errorf("the same run compared with itself: %d metrics at +0.0%%, want 4 and none marked:\n%s", n, table)
	}

	// Another seed scatters the load reports, so the seeds' mean is
	// compared and their range shown; a miss is reported, not an error.
	out.Reset()
	errb.Reset()
	if code := Main(context.Background(), append(args, "--compare", base, "--seeds", "1-3", "--compare-tolerance", "0.0001"), nil, &out, &errb); code != ExitOK {
		t.Fatalf("compare seeds: exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"mean of 3 seeds", "simulated range", "seeds 1,2,3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}

	for _, tt := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"other skip", []string{"--skip", "2999"}, "--skip: live 3000, simulation 2999"},
		{"other slo", []string{"--ttft-slo", "1s"}, "--ttft-slo (s): live 2, simulation 1"},
		{"other cluster", []string{"--workers", "3"}, "workers: live aggregated:2, simulation aggregated:3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out.Reset()
			errb.Reset()
			a := append(append(append([]string{}, args...), tt.extra...), "--compare", base)
			if code := Main(context.Background(), a, nil, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d naming %q", code, errb.String(), ExitUsage, tt.want)
			}
			if strings.Contains(out.String(), "live vs simulated") {
				t.Errorf("printed a comparison despite the mismatch:\n%s", out.String())
			}
		})
	}
}

// TestSimulateWarnsWhenOverloaded: a run where few requests meet the SLO
// says so, as bench trace warns before a replay the cluster cannot carry;
// one that meets it does not.
func TestSimulateWarnsWhenOverloaded(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"simulate", "--trace", simTrace, "--max-requests", "200", "--workers", "1", "--time-scale", "0.05"}, nil, &out, &errb)
	if code != ExitOK || !strings.Contains(errb.String(), "WARNING: only") {
		t.Errorf("overloaded: exit %d, stderr %q; want a warning", code, errb.String())
	}
	errb.Reset()
	code = Main(context.Background(), []string{"simulate", "--trace", simTrace, "--max-requests", "50", "--workers", "4", "--model", "llama-3.1-8b", "--gpu", "h100"}, nil, &out, &errb)
	if code != ExitOK || strings.Contains(errb.String(), "WARNING") {
		t.Errorf("light load: exit %d, stderr %q; want no warning", code, errb.String())
	}
}
