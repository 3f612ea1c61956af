package bench

import (
	"math"
	"strings"
	"testing"
)

// TestAuthErrorNamesTheRightKey: a refused /v1 call asks for the API key,
// a refused /admin call for the admin key.
func TestAuthErrorNamesTheRightKey(t *testing.T) {
	if err := errAdmin("GET /v1/models", 401, ""); !strings.Contains(err.Error(), "--api-key") || strings.Contains(err.Error(), "--admin-key") {
		t.Errorf("/v1 refused: %v; want it to name --api-key only", err)
	}
	if err := errAdmin("PUT /admin/router", 401, ""); !strings.Contains(err.Error(), "--admin-key") {
		t.Errorf("/admin refused: %v; want it to name --admin-key", err)
	}
}

// TestAggregatedRunHasNoPrefillSplit: a run the gate never saw prints "-"
// for the prefill local/remote split, not a misleading 0/0.
func TestAggregatedRunHasNoPrefillSplit(t *testing.T) {
	rep := &Report{Scenario: ScenarioRouting, Runs: []PolicyRun{{Policy: "kv", Aggregate: Aggregate{Requests: 2, OK: 2}}}}
	var out strings.Builder
	if err := WriteTable(&out, rep); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "prefill local/remote") && (strings.Contains(l, "0/0") || !strings.HasSuffix(strings.TrimSpace(l), "-")) {
			t.Errorf("aggregated run: %q; want -", l)
		}
	}
}

// TestPlotColoursDistinct: no two line colours of a plot are near each
// other (plotutil's palette has two reds 42 apart in RGB).
func TestPlotColoursDistinct(t *testing.T) {
	for i := range 7 {
		for j := i + 1; j < 7; j++ {
			a, b := PlotColor(i), PlotColor(j)
			ar, ag, ab, _ := a.RGBA()
			br, bg, bb, _ := b.RGBA()
			d := math.Sqrt(sq(float64(ar>>8)-float64(br>>8)) + sq(float64(ag>>8)-float64(bg>>8)) + sq(float64(ab>>8)-float64(bb>>8)))
			if d < 60 {
				t.Errorf("colours %d and %d are %.0f apart in RGB, want at least 60", i, j, d)
			}
		}
	}
}

func sq(x float64) float64 { return x * x }
