package bench

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// Paths of the shared reference traces, relative to this package.
const (
	mooncakePath  = "../../../shared/data/traces/mooncake_synthetic_trace.jsonl"
	azureConvPath = "../../../shared/data/traces/azure2023_AzureLLMInferenceTrace_conv.csv"
	azureCodePath = "../../../shared/data/traces/azure2023_AzureLLMInferenceTrace_code.csv"
)

func TestReadRealTraces(t *testing.T) {
	tests := []struct {
		name, path, format string
		wantN              int
		minSpan, maxSpan   time.Duration
	}{
		{"mooncake", mooncakePath, FormatMooncake, 3993, 1000 * time.Second, 1100 * time.Second},
		{"azure conv", azureConvPath, FormatAzure, 19366, 50 * time.Minute, 70 * time.Minute},
		{"azure code", azureCodePath, FormatAzure, 8819, 50 * time.Minute, 70 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := ReadTrace(tt.path, tt.format)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(reqs); got != tt.wantN {
				t.Errorf("requests = %d, want %d", got, tt.wantN)
			}
			if reqs[0].At != 0 {
				t.Errorf("first arrival = %v, want 0", reqs[0].At)
			}
			for i := 1; i < len(reqs); i++ {
				if reqs[i].At < reqs[i-1].At {
					t.Fatalf("arrival %d (%v) before arrival %d (%v)", i, reqs[i].At, i-1, reqs[i-1].At)
				}
			}
			if span := reqs[len(reqs)-1].At; span < tt.minSpan || span > tt.maxSpan {
				t.Errorf("span = %v, want %v..%v", span, tt.minSpan, tt.maxSpan)
			}
			if tt.format == FormatMooncake && (reqs[0].InputTokens != 40160 || reqs[0].OutputTokens != 6 || len(reqs[0].HashIDs) != 79) {
				t.Errorf("first mooncake request = %+v, want input 40160, output 6, 79 hash ids", reqs[0])
			}
		})
	}
}

func TestAzureTimestamp(t *testing.T) {
	in := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:15:46.6805900,374,44\n" +
		"2023-11-16 18:15:50.9951690,396,109\n" +
		"2023-11-16 18:16:46,10,0\n"
	reqs, err := ReadAzure(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 4314579 * time.Microsecond, 59319410 * time.Microsecond}
	for i, w := range want {
		if got := reqs[i].At; got != w {
			t.Errorf("At[%d] = %v, want %v", i, got, w)
		}
	}
	if reqs[1].InputTokens != 396 || reqs[1].OutputTokens != 109 {
		t.Errorf("request 1 = %+v, want 396/109", reqs[1])
	}
}

func TestTraceErrors(t *testing.T) {
	tests := []struct {
		name, format, in, want string
	}{
		{"mooncake not json", FormatMooncake, "{nope}\n", "line 1"},
		{"mooncake missing field", FormatMooncake, `{"timestamp":0,"input_length":5,"output_length":1}`, "hash_ids"},
		{"mooncake wrong block count", FormatMooncake, `{"timestamp":0,"input_length":513,"output_length":1,"hash_ids":[1]}`, "want 2"},
		{"mooncake negative time", FormatMooncake, `{"timestamp":-1,"input_length":5,"output_length":1,"hash_ids":[1]}`, "timestamp"},
		{"mooncake empty", FormatMooncake, "\n\n", "no requests"},
		{"azure bad header", FormatAzure, "a,b,c\n", "want TIMESTAMP"},
		{"azure bad time", FormatAzure, "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", "line 2"},
		{"azure bad count", FormatAzure, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,x,2\n", "not integers"},
		{"azure zero context", FormatAzure, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,2\n", "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.format == FormatMooncake {
				_, err = ReadMooncake(strings.NewReader(tt.in))
			} else {
				_, err = ReadAzure(strings.NewReader(tt.in))
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "bench: ") {
				t.Errorf("err = %v, want a bench error containing %q", err, tt.want)
			}
		})
	}
}

// checkTrace holds for any successfully parsed trace.
func checkTrace(t *testing.T, reqs []TraceRequest, mooncake bool) {
	t.Helper()
	for i, r := range reqs {
		if r.At < 0 || (i > 0 && r.At < reqs[i-1].At) {
			t.Fatalf("request %d: arrival %v out of order", i, r.At)
		}
		if r.InputTokens < 1 || r.OutputTokens < 0 {
			t.Fatalf("request %d: lengths %d/%d", i, r.InputTokens, r.OutputTokens)
		}
		if mooncake && len(r.HashIDs) != (r.InputTokens+MooncakeBlockTokens-1)/MooncakeBlockTokens {
			t.Fatalf("request %d: %d hash ids for %d tokens", i, len(r.HashIDs), r.InputTokens)
		}
	}
}

func firstLines(t testing.TB, path string, n int) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfterN(b, []byte("\n"), n+1)
	return bytes.Join(lines[:min(n, len(lines))], nil)
}

func FuzzReadMooncake(f *testing.F) {
	f.Add(firstLines(f, mooncakePath, 3))
	f.Add([]byte(`{"timestamp": 1.5, "input_length": 1, "output_length": 0, "hash_ids": [7]}`))
	f.Add([]byte("{}\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		reqs, err := ReadMooncake(bytes.NewReader(in))
		if err != nil {
			return
		}
		checkTrace(t, reqs, true)
	})
}

func FuzzReadAzure(f *testing.F) {
	f.Add(firstLines(f, azureConvPath, 4))
	f.Add([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,1,0\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		reqs, err := ReadAzure(bytes.NewReader(in))
		if err != nil {
			return
		}
		checkTrace(t, reqs, false)
	})
}

func TestSliceTrace(t *testing.T) {
	reqs := []TraceRequest{{At: 0, InputTokens: 1}, {At: 5 * time.Second, InputTokens: 2},
		{At: 7 * time.Second, InputTokens: 3}, {At: 12 * time.Second, InputTokens: 4}}
	tests := []struct {
		name        string
		skip, max   int
		wantTokens  []int
		wantAt      []time.Duration
		wantErrPart string
	}{
		{"whole", 0, 0, []int{1, 2, 3, 4}, []time.Duration{0, 5 * time.Second, 7 * time.Second, 12 * time.Second}, ""},
		{"max only", 0, 2, []int{1, 2}, []time.Duration{0, 5 * time.Second}, ""},
		{"skip rebases arrivals", 1, 2, []int{2, 3}, []time.Duration{0, 2 * time.Second}, ""},
		{"skip to the end", 2, 0, []int{3, 4}, []time.Duration{0, 5 * time.Second}, ""},
		{"max beyond the end", 3, 10, []int{4}, []time.Duration{0}, ""},
		{"skip past the end", 4, 0, nil, nil, "--skip 4: the trace has only 4 requests"},
		{"negative skip", -1, 0, nil, nil, "--skip -1: want >= 0"},
		{"negative max", 0, -2, nil, nil, "--max-requests -2: want >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SliceTrace(reqs, tt.skip, tt.max)
			if tt.wantErrPart != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrPart) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErrPart)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.wantTokens) {
				t.Fatalf("got %d requests, want %d", len(got), len(tt.wantTokens))
			}
			for i := range got {
				if got[i].InputTokens != tt.wantTokens[i] || got[i].At != tt.wantAt[i] {
					t.Errorf("request %d = (%d tokens at %v), want (%d at %v)", i, got[i].InputTokens, got[i].At, tt.wantTokens[i], tt.wantAt[i])
				}
			}
		})
	}
	if reqs[1].At != 5*time.Second {
		t.Errorf("SliceTrace rebased the caller's slice: request 1 at %v", reqs[1].At)
	}
}

// TestTracePlanSkip: bench trace's plan and the report's settings carry
// --skip, through the same slice simulate reads.
func TestTracePlanSkip(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scenario, cfg.TracePath, cfg.Skip, cfg.MaxRequests = ScenarioTrace, mooncakePath, 3000, 5
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := BuildPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := ReadTraceSlice(mooncakePath, FormatMooncake, 3000, 5)
	if err != nil {
		t.Fatal(err)
	}
	all, err := ReadTrace(mooncakePath, FormatMooncake)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 5 || p.Items[0].At != 0 {
		t.Fatalf("plan: %d items, first at %v; want 5 from 0", len(p.Items), p.Items[0].At)
	}
	for i, it := range p.Items {
		if it.InputTokens != all[3000+i].InputTokens || it.At != reqs[i].At || it.At != all[3000+i].At-all[3000].At {
			t.Errorf("item %d: %d tokens at %v; want trace request %d (%d tokens at %v)", i, it.InputTokens, it.At, 3000+i, all[3000+i].InputTokens, all[3000+i].At-all[3000].At)
		}
	}
	if s := settingsOf(cfg, p); s.Skip != 3000 || s.MaxRequests != 5 {
		t.Errorf("settings skip %d, max_requests %d; want 3000, 5", s.Skip, s.MaxRequests)
	}
	cfg.Skip = 4000
	if _, err := BuildPlan(cfg); err == nil || !strings.Contains(err.Error(), "only 3993 requests") {
		t.Errorf("skip past the end: err = %v, want one naming the trace's 3993 requests", err)
	}
	cfg = DefaultConfig()
	cfg.Scenario, cfg.Skip = ScenarioRouting, 5
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--skip is for the trace scenario") {
		t.Errorf("routing --skip: err = %v", err)
	}
}
