//go:build oracle

package hf

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/tokenizer/tokentest"
)

// cpuTime is the process's user+system CPU time (tokentest.CPUTime).
var cpuTime = tokentest.CPUTime

// BenchmarkLoad is the time to load each family's tokenizer.json (and
// tokenizer_config.json) from disk, with the CPU time and the heap the
// loaded tokenizer keeps.
func BenchmarkLoad(b *testing.B) {
	for _, family := range families {
		b.Run(family, func(b *testing.B) {
			dir := oraclePaths(b)[family]
			var keep *Tokenizer
			c0 := cpuTime()
			for b.Loop() {
				tk, err := Load(dir)
				if err != nil {
					b.Fatal(err)
				}
				keep = tk
			}
			b.ReportMetric(float64((cpuTime()-c0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			var before, after runtime.MemStats
			keep = nil
			runtime.GC()
			runtime.ReadMemStats(&before)
			keep, _ = Load(dir)
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MB")
			runtime.KeepAlive(keep)
		})
	}
}

// englishWords is the n-word English prompt of the benchmarks (the
// frontend's too): tokentest.EnglishWords with seed 1500.
func englishWords(n int) string { return tokentest.EnglishWords(n, 1500) }

// BenchmarkEncode1500Words encodes a 1,500-word English prompt with
// Qwen3's tokenizer into a reused buffer, and runs the npm oracle on the
// same text in the same run: oracle-µs is its warm median, ratio the
// oracle's time over ours.
//
//	make tokenizer-deps && go test -tags oracle -run '^$' -bench Encode1500Words -cpu 1 ./internal/tokenizer/hf/
func BenchmarkEncode1500Words(b *testing.B) {
	text := englishWords(1500)
	for _, family := range families {
		b.Run(family, func(b *testing.B) {
			tk := familyTokenizer(b, family)
			buf := tk.AppendEncode(nil, text)
			n := len(buf)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			// Collect the loading's garbage now, or the collector's
			// background work lands in the timed loop's CPU time.
			runtime.GC()
			b.ResetTimer()
			c0 := cpuTime()
			for b.Loop() {
				buf = tk.AppendEncode(buf[:0], text)
			}
			cpu := cpuTime() - c0
			b.StopTimer()
			// CPU time is the steadier figure on a shared machine: wall
			// time also counts the neighbours' turns on the core.
			b.ReportMetric(float64(cpu.Nanoseconds())/1000/float64(b.N), "cpu-µs/op")
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(n), "tokens")
			b.ReportMetric(ns/1000, "µs/op")
			f := filepath.Join(b.TempDir(), "prompt.txt")
			if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command("node", "oracle.mjs", "bench", family, f, "200")
			cmd.Dir = oracleDir(b)
			out, err := cmd.Output()
			if err != nil {
				b.Fatalf("oracle bench: %v", err)
			}
			var res struct {
				Tokens   int     `json:"tokens"`
				MedianUS float64 `json:"median_us"`
			}
			if err := json.Unmarshal(out, &res); err != nil {
				b.Fatal(err)
			}
			if res.Tokens != n {
				b.Fatalf("oracle counts %d tokens, we %d", res.Tokens, n)
			}
			b.ReportMetric(res.MedianUS, "oracle-µs")
			b.ReportMetric(res.MedianUS/(ns/1000), "oracle/ours")
		})
	}
}
