//go:build oracle

package hf

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time. On this shared machine
// wall time mostly measures the neighbours; CPU time is what a load
// costs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

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
