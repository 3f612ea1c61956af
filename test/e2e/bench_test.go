//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/jsonschema"
)

// TestBenchRoutingAgainstUp runs `switchyard bench routing` comparing kv
// and round-robin against a real cluster whose cache is sized so that
// scattering costs, and checks the JSON report against its schema.
func TestBenchRoutingAgainstUp(t *testing.T) {
	url := up(t, "--workers", "2", "--kv-blocks", "300", "--speedup", "20")
	dir := t.TempDir()
	out := filepath.Join(dir, "bench.json")
	cmd := exec.Command(binary(t), "bench", "routing", "--url", url, "--requests", "30", "--prefixes", "5",
		"--prefix-tokens", "1200", "--compare-policies", "kv,round-robin", "--json", out, "--plot", filepath.Join(dir, "ttft.png"))
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench routing: %v\n%s", err, b)
	}
	t.Logf("\n%s", b)
	raw := checkBenchSchema(t, "bench report", out)
	var rep struct {
		Runs []struct {
			Policy    string `json:"policy"`
			Aggregate struct {
				HitRatio float64 `json:"hit_ratio"`
				Errors   int     `json:"errors"`
			} `json:"aggregate"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 {
		t.Fatalf("runs = %+v, want kv and round-robin", rep.Runs)
	}
	kv, rr := rep.Runs[0], rep.Runs[1]
	if kv.Aggregate.Errors+rr.Aggregate.Errors != 0 {
		t.Errorf("errors: kv %d, round-robin %d", kv.Aggregate.Errors, rr.Aggregate.Errors)
	}
	if kv.Aggregate.HitRatio <= rr.Aggregate.HitRatio {
		t.Errorf("hit ratio kv %.3f ≤ round-robin %.3f", kv.Aggregate.HitRatio, rr.Aggregate.HitRatio)
	}
	if _, err := os.Stat(filepath.Join(dir, "ttft.png")); err != nil {
		t.Errorf("plot: %v", err)
	}
}

// TestBenchRoutingSizesPrefixesFromDeployment: without --prefixes, bench
// routing reads each worker's KV capacity from /health and uses enough
// prefixes that they do not fit in one worker, says so, and so shows kv
// ahead of round-robin; with the old fixed 4 prefixes every policy tied.
func TestBenchRoutingSizesPrefixesFromDeployment(t *testing.T) {
	url := up(t, "--workers", "2", "--kv-blocks", "300", "--speedup", "20") // 4,800 tokens per worker
	out := filepath.Join(t.TempDir(), "bench.json")
	cmd := exec.Command(binary(t), "bench", "routing", "--url", url, "--requests", "40", "--prefix-tokens", "400",
		"--compare-policies", "kv,round-robin", "--json", out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench routing: %v\n%s", err, b)
	}
	t.Logf("\n%s", b)
	const say = "18 × 400 tokens = 7200 tokens, 1.5× the smallest worker's KV cache (4800 tokens): they do not fit in one worker"
	if !strings.Contains(string(b), say) {
		t.Errorf("output does not say %q", say)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Settings struct {
			Prefixes     int    `json:"prefixes"`
			Warmup       int    `json:"warmup"`
			PrefixSizing string `json:"prefix_sizing"`
		} `json:"settings"`
		Runs []struct {
			Aggregate struct {
				HitRatio float64 `json:"hit_ratio"`
			} `json:"aggregate"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if s := rep.Settings; s.Prefixes != 18 || s.Warmup != 18 || !strings.Contains(s.PrefixSizing, "do not fit") {
		t.Errorf("settings %+v, want 18 prefixes and warm-ups, and the sizing", s)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Aggregate.HitRatio <= rep.Runs[1].Aggregate.HitRatio+0.1 {
		t.Errorf("runs %+v: want kv's hit ratio at least 0.1 above round-robin's", rep.Runs)
	}
}

// checkBenchSchema fails the test for every way the JSON report at path
// breaks docs/bench.schema.json, and returns the report's bytes.
func checkBenchSchema(t *testing.T, what, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkSchema(t, what+" "+path, "bench.schema.json", raw)
	return raw
}

// checkSchema validates the JSON document raw against docs/<schemaFile>.
func checkSchema(t *testing.T, what, schemaFile string, raw []byte) {
	t.Helper()
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, raw)
	}
	sb, err := os.ReadFile("../../docs/" + schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(sb, &schema); err != nil {
		t.Fatalf("%s: %v", schemaFile, err)
	}
	for _, e := range jsonschema.Validate(schema, doc) {
		t.Errorf("%s vs %s: %s", what, schemaFile, e)
	}
}
