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
