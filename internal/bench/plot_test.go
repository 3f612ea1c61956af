package bench

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   []string // major tick labels
	}{
		{0, 1, []string{"0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{0, 1.05, []string{"0", "0.5", "1.0"}},
		{0, 0.088, []string{"0", "0.02", "0.04", "0.06", "0.08"}},
		{0, 7, []string{"0", "2", "4", "6"}},
		{0, 27.3, []string{"0", "10", "20"}},
		{0, 4200, []string{"0", "1000", "2000", "3000", "4000"}},
		{-0.0000001, 0.4, []string{"0", "0.1", "0.2", "0.3", "0.4"}},
	}
	for _, tc := range tests {
		var got []string
		for _, tk := range (niceTicks{}).Ticks(tc.lo, tc.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ticks(%g, %g) = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
	for _, c := range []struct{ v, want float64 }{{0.0352, 0.04}, {0.91, 1}, {3.3, 4}, {1234, 1500}} {
		if got := niceCeil(c.v); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("niceCeil(%g) = %g, want %g", c.v, got, c.want)
		}
	}
}

func TestPlotsMarkFailuresAndWriteEveryFile(t *testing.T) {
	if got := okLabel("kv", 1000, 48); got != "kv: 95.2% ok, 48 failed" {
		t.Errorf("okLabel = %q", got)
	}
	if got := okLabel("kv", 10, 0); got != "kv" {
		t.Errorf("okLabel without failures = %q", got)
	}
	ok := func(i int, ttft float64, group string) Record {
		return Record{Index: i, Outcome: OutcomeOK, TTFTS: ttft, StartS: float64(i) / 10, PromptTokens: 100, CachedTokens: 50, Group: group}
	}
	routing := &Report{Scenario: ScenarioRouting, Runs: []PolicyRun{
		{Policy: "kv", Records: []Record{ok(0, 0.01, "p0"), ok(1, 0.02, "p1"), {Index: 2, Outcome: OutcomeError, ErrorKind: "http_504"}}},
		{Policy: "round-robin", Records: []Record{ok(0, 0.03, "p0"), ok(1, 0.04, "p1")}},
	}}
	pm := func(v float64) *float64 { return &v }
	disagg := &Report{Scenario: ScenarioDisagg, Runs: []PolicyRun{{
		Records: []Record{ok(0, 0.1, "500"), ok(1, 0.3, "3000")},
		Groups: []Group{
			{Key: "500", Aggregate: Aggregate{TTFT: Quantiles{P50: pm(0.1)}}, PredictedTTFTMsMean: pm(95)},
			{Key: "3000", Aggregate: Aggregate{TTFT: Quantiles{P50: pm(0.3)}}, PredictedTTFTMsMean: pm(310)},
		},
	}}}
	dir := t.TempDir()
	for name, rep := range map[string]*Report{"routing": routing, "disagg": disagg} {
		path := filepath.Join(dir, name+".png")
		if err := WritePlots(path, rep); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		files := PlotFiles(path, rep)
		wantSecond := filepath.Join(dir, name+"-hits.png")
		if name == "disagg" {
			wantSecond = filepath.Join(dir, name+"-sizes.png")
		}
		if len(files) != 2 || files[1] != wantSecond {
			t.Errorf("%s: files %q, want the CDF and %s", name, files, wantSecond)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if _, err := png.Decode(bytes.NewReader(b)); err != nil {
				t.Errorf("%s is not a PNG: %v", f, err)
			}
		}
	}
}
