package simulate

import (
	"bytes"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/bench"
)

// TestThreadsSameReport: a windowed run on 2 or 4 goroutines gives the
// serial run's JSON byte for byte, for every router policy, with a host
// memory tier, and on 200 workers where most windows run several workers
// ahead at once. Run it under -race too: the windows share the index, the
// router and the run's counters only through the serial replay.
func TestThreadsSameReport(t *testing.T) {
	reqs, err := bench.ReadTrace(mooncakePath, bench.FormatMooncake)
	if err != nil {
		t.Fatal(err)
	}
	n := 300
	if raceEnabled {
		n = 120
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"kv", func(c *Config) {}},
		{"round-robin", func(c *Config) { c.Router = "round-robin" }},
		{"least-loaded", func(c *Config) { c.Router = "least-loaded" }},
		{"random", func(c *Config) { c.Router = "random" }},
		{"kv offload", func(c *Config) { c.Engine.KVOffloadGiB = 4 }},
		// 32k tokens of cache: the longest prompts are refused.
		{"refusals", func(c *Config) { c.Engine.KVBlocks = 2000 }},
		// 200 workers as busy as the 1,000-worker scale runs: the trace's
		// start, tiled, arrivals compressed 150 times. 4,096 KV blocks a
		// worker (an H100 holds 30 times as many) keep the index small
		// to build.
		{"kv 200", func(c *Config) {
			c.Workers, c.Items, c.Engine.KVBlocks = 200, bench.TraceItems(bench.TileTrace(reqs[:n], 2), 1.0/150), 4096
		}},
		{"least-loaded 200 offload", func(c *Config) {
			c.Workers, c.Items, c.Engine.KVBlocks = 200, bench.TraceItems(bench.TileTrace(reqs[:n], 2), 1.0/150), 4096
			c.Router, c.Engine.KVOffloadGiB = "least-loaded", 4
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := smallConfig(t, n)
			c.Workers = 16
			tc.mod(&c)
			c.Threads = 1
			serial := runSimulator(t, &c)
			want := encode(t, serial.report())
			for _, threads := range []int{2, 4} {
				c.Threads = threads
				s := runSimulator(t, &c)
				if got := encode(t, s.report()); !bytes.Equal(got, want) {
					t.Errorf("%d threads: the JSON differs from the serial run's (%d and %d bytes)", threads, len(got), len(want))
				}
				// Else the test proves nothing.
				if s.shared == 0 {
					t.Errorf("%d threads: no window ran two workers ahead at once", threads)
				}
				if s.split == 0 && c.Workers == 200 {
					t.Errorf("%d threads: no window split its index writes", threads)
				}
				if a := s.report().Runs[0].Aggregate; tc.name == "refusals" && a.Errors == 0 {
					t.Errorf("no request refused: the case tests nothing")
				}
			}
			if serial.shared != 0 {
				t.Errorf("the serial run ran %d windows", serial.shared)
			}
		})
	}
}

// A worker's step and report due at the same time run in the order they
// were queued, as the queue pops them by seq.
func TestNextOwnTies(t *testing.T) {
	for _, tc := range []struct {
		name               string
		stepSeq, reportSeq uint64
		want               uint8
	}{
		{"step queued first", 1, 2, evStep},
		{"report queued first", 2, 1, evReport},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &worker{stepping: true, ticking: true, stepEnd: 5, nextReport: 5}
			w.stepSeq, w.reportSeq = tc.stepSeq, tc.reportSeq
			if kind, at, ok := w.nextOwn(); kind != tc.want || at != 5 || !ok {
				t.Errorf("nextOwn() = %d, %v, %v; want %d, 5ns, true", kind, at, ok, tc.want)
			}
		})
	}
}

// BenchmarkCrewDo is the barrier a windowed run pays per window at
// --threads 2 (twice in windows whose index writes it splits): waking a
// helper with an empty job and waiting for it.
func BenchmarkCrewDo(b *testing.B) {
	c := newCrew(1)
	defer c.stop()
	var n [2]int
	for b.Loop() {
		c.do(2, func(part int) { n[part]++ })
	}
	if n[0] != n[1] || n[0] == 0 {
		b.Fatalf("parts ran %d and %d times", n[0], n[1])
	}
}
