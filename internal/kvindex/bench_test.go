package kvindex

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Benchmarks. Reproduce with:
//
//	go test ./internal/kvindex -run '^$' -bench . -benchtime 2s
//
// BenchmarkLookup10M builds a 10 M-block index once (about 4 s and 0.4 GB)
// and, with BenchmarkStoreParallel, is skipped under -short.

const (
	bigWorkers    = 1000
	bigChainLen   = 512
	bigChains     = 20000 // 20,000 chains × 512 blocks = 10.24 M blocks
	sharedHolders = 4
	lateOffset    = 50 // chains lateOffset, lateOffset+100, ... get their extra holders last
)

// synthChain fills dst with the hashes of synthetic chain c. Hashes of
// distinct chains are independent 64-bit values, as real chained hashes are.
func synthChain(dst []uint64, c int) []uint64 {
	dst = dst[:0]
	for i := 0; i < bigChainLen; i++ {
		dst = append(dst, Mix(uint64(c)<<20|uint64(i)+0x1234567))
	}
	return dst
}

// threadCPU returns the CPU time the calling OS thread has used. On a
// shared machine it separates our work from time spent waiting for a core;
// callers lock their goroutine to the thread.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD, Linux
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var big struct {
	once        sync.Once
	x           *Index
	bytesPerEnt float64
	buildRate   float64 // blocks/s while building
}

// bigIndex holds 20,000 chains of 512 blocks over 1,000 workers: chain c
// belongs to worker c mod 1000; every 100th chain is also held by three
// more workers, stored right after it, and every 100th from lateOffset by
// three more stored once the index is full.
func bigIndex(tb testing.TB) *Index {
	big.once.Do(func() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		x := New(Config{})
		buf := make([]uint64, 0, bigChainLen)
		names := make([]string, bigWorkers)
		for i := range names {
			names[i] = fmt.Sprintf("worker-%04d", i)
		}
		start := time.Now()
		stored := 0
		for c := 0; c < bigChains; c++ {
			buf = synthChain(buf, c)
			x.Store(names[c%bigWorkers], buf)
			stored += len(buf)
			if c%100 == 0 {
				for k := 1; k < sharedHolders; k++ {
					x.Store(names[(c+k*7)%bigWorkers], buf)
					stored += len(buf)
				}
			}
		}
		big.buildRate = float64(stored) / time.Since(start).Seconds()
		// Then three more holders for every 100th chain from 50 on, stored
		// into the full index: continuations inserted late land further
		// down their probe runs than those stored while the table grew.
		for c := lateOffset; c < bigChains; c += 100 {
			buf = synthChain(buf, c)
			for k := 1; k < sharedHolders; k++ {
				x.Store(names[(c+k*13)%bigWorkers], buf)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		big.bytesPerEnt = float64(after.HeapAlloc-before.HeapAlloc) / float64(x.Entries())
		big.x = x
	})
	return big.x
}

// BenchmarkLookup10M looks up full 512-block chains, each held by one or
// four workers (four-late: three of them stored into the full index), in
// the 10 M-block index. It reports the median and 99th
// percentile of single lookups and the heap bytes per (block, worker) entry.
func BenchmarkLookup10M(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 10 M-block index")
	}
	x := bigIndex(b)
	for _, tc := range []struct {
		name    string
		stride  int // chains queried: 0, stride, 2·stride, ...
		holders int
	}{
		{"one-holder", 7, 1}, // 7 is coprime with 100: mostly unshared chains
		{"four-holders", 100, sharedHolders},
		{"four-late", 100, sharedHolders},
	} {
		b.Run(tc.name, func(b *testing.B) {
			queries := make([][]uint64, 256)
			for i := range queries {
				c := (i * tc.stride) % bigChains
				if tc.holders == 1 && (c%100 == 0 || c%100 == lateOffset) {
					c++
				}
				if tc.name == "four-late" {
					c += lateOffset
				}
				queries[i] = synthChain(nil, c)
			}
			var o Overlaps
			x.Overlaps(queries[0], &o)
			if len(o.Hits) != tc.holders || o.Max() != bigChainLen {
				b.Fatalf("check: %d hits, max %d; want %d, %d", len(o.Hits), o.Max(), tc.holders, bigChainLen)
			}
			lat := make([]time.Duration, 0, 1<<16)
			i := 0
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ResetTimer()
			cpu0 := threadCPU()
			for b.Loop() {
				q := queries[i%len(queries)]
				i++
				t0 := time.Now()
				x.Overlaps(q, &o)
				if len(lat) < cap(lat) {
					lat = append(lat, time.Since(t0))
				}
			}
			b.StopTimer()
			// CPU time of this thread: on a shared machine, the steadier
			// figure (wall time counts waits for a core).
			b.ReportMetric(float64((threadCPU()-cpu0).Nanoseconds())/float64(i), "cpu-ns/lookup")
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns/lookup")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/lookup")
			b.ReportMetric(big.bytesPerEnt, "B/entry")
			b.ReportMetric(big.buildRate/1e6, "build-Mblocks/s")
			b.ReportMetric(float64(hugeTables.Load()), "huge-tables")
			b.ReportMetric(float64(anonHugeBytes())/(1<<20), "thp-MiB")
		})
	}
}

// BenchmarkStore applies stored events of 64 fresh blocks each from 1,000
// workers into a growing index (doublings included) and reports blocks/s.
func BenchmarkStore(b *testing.B) {
	names := make([]string, bigWorkers)
	for i := range names {
		names[i] = fmt.Sprintf("worker-%04d", i)
	}
	x := New(Config{})
	ev := make([]uint64, 64)
	n := 0
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0 := threadCPU()
	for b.Loop() {
		for j := range ev {
			ev[j] = Mix(uint64(n*64 + j))
		}
		x.Store(names[n%bigWorkers], ev)
		n++
	}
	b.ReportMetric(float64(n*len(ev))/b.Elapsed().Seconds()/1e6, "Mblocks/s")
	b.ReportMetric(float64(n*len(ev))/(threadCPU()-cpu0).Seconds()/1e6, "Mblocks/cpu-s")
	if x.Entries() != n*len(ev) {
		b.Fatalf("entries = %d, want %d", x.Entries(), n*len(ev))
	}
}

// BenchmarkStoreParallel is the measurement behind Config.Shards: parallel
// writers into one index with 1 or 64 shards, to 4 M entries, reporting
// throughput and the longest single Store call (a table doubling).
func BenchmarkStoreParallel(b *testing.B) {
	if testing.Short() {
		b.Skip("fills 4 Mi entries per shard count")
	}
	for _, shards := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			const total = 4 << 20
			var worst time.Duration
			var mu sync.Mutex
			for b.Loop() {
				x := New(Config{Shards: shards})
				var next int64
				var nmu sync.Mutex
				var wg sync.WaitGroup
				start := time.Now()
				for w := 0; w < runtime.GOMAXPROCS(0); w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ev := make([]uint64, 64)
						name := fmt.Sprintf("worker-%d", w)
						for {
							nmu.Lock()
							base := next
							next += int64(len(ev))
							nmu.Unlock()
							if base >= total {
								return
							}
							for j := range ev {
								ev[j] = Mix(uint64(base) + uint64(j))
							}
							t0 := time.Now()
							x.Store(name, ev)
							d := time.Since(t0)
							mu.Lock()
							worst = max(worst, d)
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(total/time.Since(start).Seconds()/1e6, "Mblocks/s")
			}
			b.ReportMetric(float64(worst.Microseconds()), "worst-store-µs")
		})
	}
}

// anonHugeBytes returns how much of the process's anonymous memory the kernel
// backs with transparent huge pages (AnonHugePages in smaps_rollup), or 0
// where that file does not exist. madvise only asks; this is what was given.
func anonHugeBytes() int64 {
	f, err := os.Open("/proc/self/smaps_rollup")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "AnonHugePages:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkStoreSteady applies events to an index at a steady size, as a
// long-running router does: the table is sized up front, holds 1 Mi entries
// from 1,000 workers, and each iteration stores one 64-block event and
// removes the oldest one. It reports blocks applied (stored plus removed) per
// second and per CPU-second of the benchmark's thread.
func BenchmarkStoreSteady(b *testing.B) {
	const (
		evLen  = 64
		live   = 1 << 14 // events held: 1 Mi entries
		shards = 64
	)
	names := make([]string, bigWorkers)
	for i := range names {
		names[i] = fmt.Sprintf("worker-%04d", i)
	}
	// 1 Mi entries at under 3/4 load over 64 shards: 32 Ki slots each.
	x := New(Config{Shards: shards, InitialSlots: 2 * live * evLen / shards})
	event := func(dst []uint64, n int) []uint64 {
		dst = dst[:0]
		for j := 0; j < evLen; j++ {
			dst = append(dst, Mix(uint64(n*evLen+j)^0x5eed))
		}
		return dst
	}
	ev := make([]uint64, 0, evLen)
	for n := 0; n < live; n++ {
		x.Store(names[n%bigWorkers], event(ev, n))
	}
	slots := x.Slots()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := live
	cpu0 := threadCPU()
	for b.Loop() {
		x.Store(names[n%bigWorkers], event(ev, n))
		old := n - live
		x.Remove(names[old%bigWorkers], event(ev, old))
		n++
	}
	blocks := float64(2 * (n - live) * evLen)
	b.ReportMetric(blocks/b.Elapsed().Seconds()/1e6, "Mblocks/s")
	b.ReportMetric(blocks/(threadCPU()-cpu0).Seconds()/1e6, "Mblocks/cpu-s")
	if got := x.Entries(); got != live*evLen {
		b.Fatalf("entries = %d, want %d", got, live*evLen)
	}
	if x.Slots() != slots {
		b.Fatalf("table grew from %d to %d slots; the benchmark means to measure no growth", slots, x.Slots())
	}
}
