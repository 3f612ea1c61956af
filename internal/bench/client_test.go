package bench

import (
	"context"
	"testing"
)

func TestHasText(t *testing.T) {
	tests := []struct {
		name, in string
		want     bool
	}{
		{"completion text", `{"choices":[{"index":0,"text":" hi","finish_reason":null}],"usage":null}`, true},
		{"empty text", `{"choices":[{"index":0,"text":"","finish_reason":null}]}`, false},
		{"spaces around colon", `{"choices":[{"text" :  "x"}]}`, true},
		{"chat content", `{"choices":[{"delta":{"content":"x"}}]}`, true},
		{"chat role only", `{"choices":[{"delta":{"role":"assistant"}}]}`, false},
		{"usage chunk", `{"choices":[],"usage":{"prompt_tokens":3}}`, false},
		{"key text inside a value", `{"id":"\"text\":\"x","choices":[{"text":""}]}`, false},
		{"value equal to text", `{"object":"text","choices":[]}`, false},
		{"escaped quote first", `{"choices":[{"text":"\"q"}]}`, true},
		{"truncated", `{"choices":[{"text`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hasText([]byte(tt.in)); got != tt.want {
				t.Errorf("hasText(%s) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestChunkScanAllocs(t *testing.T) {
	chunk := []byte(`{"id":"x","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":" tok","finish_reason":null,"logprobs":null}],"usage":null}`)
	got := testing.AllocsPerRun(1000, func() {
		if !hasText(chunk) {
			t.Fatal("no text")
		}
		if v, ok := jsonValue(chunk, "usage"); !ok || v[0] != 'n' {
			t.Fatal("usage not null")
		}
	})
	if got != 0 {
		t.Errorf("allocations per chunk scan = %v, want 0", got)
	}
}

func FuzzHasText(f *testing.F) {
	f.Add([]byte(`{"choices":[{"text":"x"}]}`))
	f.Add([]byte(`{"a":"\\"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = hasText(b) // must not panic on any input
		_, _ = jsonValue(b, "error")
	})
}

// BenchmarkSelftest measures bench's own ceiling: streamed requests per
// second against an in-process trivial server (4 chunks each, concurrency
// 64), both sharing this machine's cores.
func BenchmarkSelftest(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Scenario, cfg.Requests, cfg.Prefixes, cfg.PrefixTokens, cfg.SuffixTokens, cfg.Warmup = ScenarioSelftest, b.N, 4, 64, 8, 0
	cfg.MaxTokens, cfg.Concurrency = 4, 64
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	rep, err := Selftest(context.Background(), cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	a := rep.Runs[0].Aggregate
	if a.OK != b.N {
		b.Fatalf("ok = %d of %d: %v", a.OK, b.N, a.ErrorKinds)
	}
	b.ReportMetric(a.RequestsPerS, "req/s")
}
