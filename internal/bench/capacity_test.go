package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

func defaultUpHealth(t testing.TB) Health {
	t.Helper()
	m, err := perfmodel.LookupModel("qwen3-0.6b")
	if err != nil {
		t.Fatal(err)
	}
	g, err := perfmodel.LookupGPU("rtx-4060")
	if err != nil {
		t.Fatal(err)
	}
	p := perfmodel.NewProfile(m, g, 1)
	p.MaxBatchTokens = 8192
	w := func(id string) HealthWorker {
		return HealthWorker{ID: id, Role: "aggregated", KVBlocks: 3274, BlockSize: 16, Profile: &p}
	}
	return Health{BlockSize: 16, Workers: []HealthWorker{w("w1"), w("w2")}}
}

// arrivals is n requests of in input and out output tokens, one every gap.
func arrivals(n, in, out int, gap time.Duration) []Item {
	items := make([]Item, n)
	for i := range items {
		items[i] = Item{Index: i, At: time.Duration(i) * gap, InputTokens: in, MaxTokens: out}
	}
	return items
}

func TestEstimateLoad(t *testing.T) {
	h := defaultUpHealth(t)
	// 12k-token prompts (Mooncake's mean) ten a second overload two
	// simulated rtx-4060s many times over.
	heavy, ok := EstimateLoad(arrivals(100, 12000, 300, 100*time.Millisecond), h, 0.1)
	if !ok || heavy.Utilisation < 5 || heavy.Workers != 2 {
		t.Fatalf("heavy: %+v ok=%v, want utilisation well above 1 on 2 workers", heavy, ok)
	}
	for _, want := range []string{"WARNING", "--time-scale", "up --workers", "up --speedup", "Requests will queue"} {
		if !strings.Contains(heavy.Warning, want) {
			t.Errorf("heavy warning %q does not say %q", heavy.Warning, want)
		}
	}
	// The same requests spread ten times wider: a tenth of the load.
	wide, _ := EstimateLoad(arrivals(100, 12000, 300, time.Second), h, 1)
	if r := heavy.Utilisation / wide.Utilisation; r < 9.9 || r > 10.1 {
		t.Errorf("10× the spacing divided utilisation by %.2f, want 10", r)
	}
	light, ok := EstimateLoad(arrivals(20, 200, 20, time.Second), h, 1)
	if !ok || light.Utilisation >= 0.5 || strings.Contains(light.Warning, "WARNING") || !strings.Contains(light.Warning, "offered load ≈") {
		t.Errorf("light: %+v, want a low utilisation and no warning", light)
	}
	// Twice the simulated speed halves the load.
	fast := defaultUpHealth(t)
	p := *fast.Workers[0].Profile
	p.Speedup = 2
	for i := range fast.Workers {
		fast.Workers[i].Profile = &p
	}
	if f, _ := EstimateLoad(arrivals(100, 12000, 300, 100*time.Millisecond), fast, 0.1); f.Utilisation*2 < heavy.Utilisation*0.99 || f.Utilisation*2 > heavy.Utilisation*1.01 {
		t.Errorf("speedup 2: utilisation %.2f, want half of %.2f", f.Utilisation, heavy.Utilisation)
	}
	// A real engine registers no profile: no estimate, no false alarm.
	if _, ok := EstimateLoad(arrivals(10, 100, 10, time.Second), Health{Workers: []HealthWorker{{ID: "v", Role: "aggregated"}}}, 1); ok {
		t.Error("estimated a load without profiles")
	}
}

func TestErrorKindsInSummary(t *testing.T) {
	rep := &Report{Scenario: ScenarioTrace, Runs: []PolicyRun{{Records: []Record{
		{Outcome: OutcomeError, ErrorKind: "http_504", ErrorMsg: "frontend: worker w1: no response headers within 1m0s"},
		{Outcome: OutcomeError, ErrorKind: "http_504", ErrorMsg: "another"},
		{Outcome: OutcomeError, ErrorKind: "http_400", ErrorMsg: "This model's maximum context length is 40960 tokens."},
		{Outcome: OutcomeOK},
		{Warmup: true, Outcome: OutcomeError, ErrorKind: "transport"},
	}}}}
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	i504, i400 := strings.Index(out, "  http_504  2"), strings.Index(out, "  http_400  1")
	if !strings.Contains(out, "errors by kind:") || i504 < 0 || i400 < i504 {
		t.Errorf("want an errors-by-kind section, most frequent first:\n%s", out)
	}
	for _, want := range []string{"no response headers within 1m0s", "slow the replay (--time-scale)", "beyond max_model_len"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "transport") {
		t.Errorf("a warm-up error reached the summary:\n%s", out)
	}
}

func TestTraceFormatFromExtension(t *testing.T) {
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "azure.csv")
	if err := os.WriteFile(csvPath, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Scenario, cfg.TracePath = ScenarioTrace, csvPath
	if err := cfg.Validate(); err != nil || cfg.TraceFormat != FormatAzure {
		t.Fatalf("format %q err %v, want azure for a .csv", cfg.TraceFormat, err)
	}
	if _, err := BuildPlan(cfg); err != nil {
		t.Errorf("plan from an inferred azure trace: %v", err)
	}
	cfg = DefaultConfig()
	cfg.Scenario, cfg.TracePath = ScenarioTrace, "x.jsonl"
	if err := cfg.Validate(); err != nil || cfg.TraceFormat != FormatMooncake {
		t.Errorf("format %q err %v, want mooncake for .jsonl", cfg.TraceFormat, err)
	}
	// An explicit wrong format says which one to use.
	if _, err := ReadTrace(csvPath, FormatMooncake); err == nil || !strings.Contains(err.Error(), "pass --format azure") {
		t.Errorf("CSV read as mooncake: %v, want a hint at --format azure", err)
	}
	jl := filepath.Join(dir, "t.txt")
	if err := os.WriteFile(jl, []byte(`{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[1]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTrace(jl, FormatAzure); err == nil || !strings.Contains(err.Error(), "pass --format mooncake") {
		t.Errorf("JSONL read as azure: %v, want a hint at --format mooncake", err)
	}
}
