//go:build e2e

package e2e

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const mooncakeTrace = "../../../shared/data/traces/mooncake_synthetic_trace.jsonl"

type simAggregate struct {
	Requests      int      `json:"requests"`
	OK            int      `json:"ok"`
	Errors        int      `json:"errors"`
	TTFTP50S      *float64 `json:"ttft_p50_s"`
	TTFTP99S      *float64 `json:"ttft_p99_s"`
	HitRatio      float64  `json:"hit_ratio"`
	GoodputRPS    float64  `json:"goodput_rps"`
	GoodRequests  int      `json:"good_requests"`
	PrefillLocal  int      `json:"prefill_local"`
	PrefillRemote int      `json:"prefill_remote"`
}

// ttftMedians reads a report's records and returns the median TTFT, in
// seconds, of the successful requests that found at least hit prompt
// tokens cached and of the others, with their counts.
func ttftMedians(t *testing.T, path string, hit int) (hitP50, missP50 float64, hits, misses int) {
	t.Helper()
	var rep struct {
		Runs []struct {
			Records []struct {
				Status int      `json:"status"`
				TTFTS  *float64 `json:"ttft_s"`
				Cached int      `json:"cached_tokens"`
			} `json:"records"`
		} `json:"runs"`
	}
	readReport(t, path, &rep)
	var h, m []float64
	for _, r := range rep.Runs[0].Records {
		switch {
		case r.Status != 200 || r.TTFTS == nil:
		case r.Cached >= hit:
			h = append(h, *r.TTFTS)
		default:
			m = append(m, *r.TTFTS)
		}
	}
	median := func(v []float64) float64 {
		if len(v) == 0 {
			return math.NaN()
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return median(h), median(m), len(h), len(m)
}

// readReport decodes the JSON report at path into v, the fields a check
// needs.
func readReport(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func readAggregate(t *testing.T, path string) simAggregate {
	t.Helper()
	var rep struct {
		Runs []struct {
			Aggregate simAggregate `json:"aggregate"`
		} `json:"runs"`
	}
	readReport(t, path, &rep)
	if len(rep.Runs) != 1 {
		t.Fatalf("%s: %d runs, want 1", path, len(rep.Runs))
	}
	return rep.Runs[0].Aggregate
}

// agreement runs one trace through bench against `up` and through
// simulate with the same engine flags and --compare on the live report
// (which must accept it as the same workload and print its table), checks
// the simulated report against bench's schema, and returns both aggregates.
func agreement(t *testing.T, engine, workload []string) (live, sim simAggregate, livePath, simPath string) {
	t.Helper()
	dir := t.TempDir()
	livePath, simPath = filepath.Join(dir, "live.json"), filepath.Join(dir, "sim.json")
	url := up(t, engine...)
	cmd := exec.Command(binary(t), append([]string{"bench", "trace", "--url", url, "--json", livePath, "--max-error-rate", "0.02"}, workload...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bench trace: %v\n%s", err, b)
	}
	cmd = exec.Command(binary(t), append(append([]string{"simulate", "--router", "kv", "--json", simPath, "--compare", livePath}, engine...), workload...)...)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), "live vs simulated") {
		t.Errorf("simulate --compare printed no comparison:\n%s", b)
	}

	// The simulated report is bench's report: it passes bench's schema.
	checkBenchSchema(t, "simulate report", simPath)

	live, sim = readAggregate(t, livePath), readAggregate(t, simPath)
	t.Logf("live: TTFT p50 %.3f s p99 %.3f s, hit %.3f, goodput %.2f req/s (%d/%d), errors %d",
		*live.TTFTP50S, *live.TTFTP99S, live.HitRatio, live.GoodputRPS, live.GoodRequests, live.Requests, live.Errors)
	t.Logf("sim:  TTFT p50 %.3f s p99 %.3f s, hit %.3f, goodput %.2f req/s (%d/%d), errors %d",
		*sim.TTFTP50S, *sim.TTFTP99S, sim.HitRatio, sim.GoodputRPS, sim.GoodRequests, sim.Requests, sim.Errors)
	if sim.Requests != live.Requests || sim.Errors != live.Errors {
		t.Errorf("requests/errors: sim %d/%d, live %d/%d: the same slice must fail the same way",
			sim.Requests, sim.Errors, live.Requests, live.Errors)
	}
	return live, sim, livePath, simPath
}

func within(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*want {
		t.Errorf("%s: sim %.4f, live %.4f: more than %.0f%% apart", what, got, want, 100*rel)
	}
}

// TestSimulateAgreesWithLive replays the same traces through bench against
// `up` and through `simulate` with the same --speedup and --time-scale, and
// checks that they agree. The margins are wider than the
// README's 15% because the live side runs faster than real time on two
// shared, noisy cores with 150 requests, where a few requests move a
// percentile; the README's validation uses 1× speed and up to 1,000
// requests.
func TestSimulateAgreesWithLive(t *testing.T) {
	engine := func(speedup string) []string {
		return []string{"--workers", "4", "--model", "llama-3.1-8b", "--gpu", "h100", "--speedup", speedup}
	}

	t.Run("mooncake", func(t *testing.T) {
		// Requests 3400-3549: the trace's first requests reuse almost no
		// prefix (requests 0-149: a hit ratio made by 5 requests, one of
		// them a third of it), these do (33-36 requests, none over 11% of
		// the cached tokens), so the hit ratio is compared as a ratio.
		// 2×, not 4×: the slice's 30k-40k-token prefills keep the live
		// engines' cores busy, and at 4× on CI's loaded box they fell
		// behind their schedule (switchyard_worker_pacing_lag_seconds):
		// live TTFT p50 came in 22-45% above the simulation's, against
		// 4-18% at 1× and 2× in the README's runs. --time-scale 1 (half
		// the trace's rate at 2×: workers ~77% busy simulated) rather than
		// 0.5 (~94%): at 0.5 live goodput fell 4-17% below the
		// simulation's in three runs on a box at load 10-13, as the live
		// engines fell behind; at 1 it agreed within 1% (38 s against 23 s).
		slo := []string{"--time-scale", "1", "--ttft-slo", "1s", "--itl-slo", "50ms"}
		live, sim, _, _ := agreement(t, engine("2"), append([]string{"--trace", mooncakeTrace, "--format", "mooncake",
			"--skip", "3400", "--max-requests", "150"}, slo...))
		// The p50 request (~130 ms simulated) is short, so live's fixed
		// overhead (HTTP, JSON, SSE, timer wake-ups on busy cores: 5-35 ms
		// measured) is a large share of it: live must lie between 0.9 ×
		// the simulation and 100 ms above it.
		if l, s := *live.TTFTP50S, *sim.TTFTP50S; !(l >= 0.9*s && l <= s+0.100) {
			t.Errorf("TTFT p50: live %.4f s, sim %.4f s: want live within [0.9 × sim, sim + 100 ms]", l, s)
		}
		// p99 of 150 requests is the second-slowest request: on CI's two
		// busy cores one late timer moves it (a 20-40% swing was seen
		// between live runs), so only a gross disagreement fails here.
		within(t, "TTFT p99", *sim.TTFTP99S, *live.TTFTP99S, 0.6)
		within(t, "goodput", sim.GoodputRPS, live.GoodputRPS, 0.25)
		// Where kv places a prefix turns on the load at its arrival, which
		// the seed's report phases scatter (simulated 0.214-0.234 over
		// seeds 1-8; live 0.232-0.245 in three runs) and live arrival
		// order moves further.
		within(t, "hit ratio", sim.HitRatio, live.HitRatio, 0.25)
	})

	t.Run("shared-prefixes", func(t *testing.T) {
		// 400 requests over 12 prefixes of 4,096 tokens with unique
		// 300-token suffixes, 10 per trace second, on caches of 1,200
		// blocks (19,200 tokens: four prefixes each), so where kv places a
		// prefix decides the hit ratio.
		trace := filepath.Join(t.TempDir(), "shared.jsonl")
		var b []byte
		x := uint32(12345)
		for i := range 400 {
			x = x*1664525 + 1013904223
			k := int64(x>>16) % 12
			ids := []int64{}
			for j := range int64(8) {
				ids = append(ids, k*100+j)
			}
			ids = append(ids, 10000+int64(i))
			line, _ := json.Marshal(map[string]any{"timestamp": i * 100, "input_length": 8*512 + 300, "output_length": 32, "hash_ids": ids})
			b = append(append(b, line...), '\n')
		}
		if err := os.WriteFile(trace, b, 0o644); err != nil {
			t.Fatal(err)
		}
		slo := []string{"--time-scale", "0.25", "--ttft-slo", "500ms", "--itl-slo", "25ms"}
		eng := append(engine("4"), "--kv-blocks", "1200")
		live, sim, livePath, simPath := agreement(t, eng, append([]string{"--trace", trace, "--format", "mooncake"}, slo...))
		// Where kv puts a prefix turns on the load at the moment of
		// arrival, so the hit ratio varies from run to run (0.52-0.62 live
		// and simulated under the kv cost in blocks; 0.89 live and
		// simulated under the cost in time). Live is compared with the
		// mean of three simulations whose seeds scatter the workers'
		// load-report phases, as live start times do.
		hits := sim.HitRatio
		for _, seed := range []string{"2", "3"} {
			p := filepath.Join(t.TempDir(), "sim.json")
			args := append(append([]string{"simulate", "--json", p, "--trace", trace, "--format", "mooncake", "--seed", seed}, eng...), slo...)
			if b, err := exec.Command(binary(t), args...).CombinedOutput(); err != nil {
				t.Fatalf("simulate: %v\n%s", err, b)
			}
			hits += readAggregate(t, p).HitRatio
		}
		within(t, "hit ratio (mean of three simulations)", hits/3, live.HitRatio, 0.2)
		within(t, "goodput", sim.GoodputRPS, live.GoodputRPS, 0.25)
		// TTFT here has two modes: a request that finds its 4,096-token
		// prefix cached prefills 300 tokens (simulated ~6 ms), one that
		// does not prefills 4,396 (~42 ms). When about half the requests
		// hit, the p50 sits between the modes and flips with a few percent
		// of hit ratio (live p50 once came in at 11.7 ms against 21.9 ms
		// simulated: live had more hits, so its median fell in the fast
		// mode). So each mode is compared on its own. Live adds what
		// simulate does not model (HTTP, a 4,400-token JSON prompt, SSE,
		// timer wake-ups on CI's busy cores: 5-30 ms measured), so live
		// must lie between the simulated median and 100 ms above it.
		sh, sm, _, _ := ttftMedians(t, simPath, 4096)
		lh, lm, nh, nm := ttftMedians(t, livePath, 4096)
		t.Logf("TTFT p50 of full-prefix hits: live %.4f s (%d), sim %.4f s; of the others: live %.4f s (%d), sim %.4f s", lh, nh, sh, lm, nm, sm)
		for _, c := range []struct {
			what       string
			live, want float64
		}{{"full-prefix hits", lh, sh}, {"misses", lm, sm}} {
			if !(c.live >= 0.9*c.want && c.live <= c.want+0.100) {
				t.Errorf("TTFT p50 of %s: live %.4f s, sim %.4f s: want live within [0.9 × sim, sim + 100 ms]", c.what, c.live, c.want)
			}
		}
	})
}
