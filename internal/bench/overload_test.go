package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseOverloadMix(t *testing.T) {
	mix, err := ParseOverloadMix(DefaultOverloadMix, "alpha=ka,beta=kb")
	if err != nil {
		t.Fatal(err)
	}
	if len(mix) != 4 || mix[0].Key != "ka" || mix[3].Priority != "sheddable" || mix[3].Streams != 8 || mix[3].Key != "kb" {
		t.Errorf("mix %+v", mix)
	}
	for _, bad := range []string{"alpha:urgent:1", "alpha:standard:0", "alpha:standard", "alpha:standard:x"} {
		if _, err := ParseOverloadMix(bad, ""); err == nil {
			t.Errorf("mix %q accepted", bad)
		}
	}
	if _, err := ParseOverloadMix(DefaultOverloadMix, "alpha"); err == nil {
		t.Errorf("keys without = accepted")
	}
}

// TestOverloadReport: shares, sums per tenant, the table and the plots.
func TestOverloadReport(t *testing.T) {
	r := &OverloadReport{DurationS: 20, Classes: []OverloadClass{
		{Tenant: "a", Priority: "standard", Sent: 10, Served: 8, Abandoned: 2, ServedTokens: 300, ttfts: []float64{1, 2, 3}},
		{Tenant: "a", Priority: "critical", Sent: 5, Served: 5, ServedTokens: 100, ttfts: []float64{0.1}},
		{Tenant: "b", Priority: "sheddable", Sent: 4, Shed: 4, ShedWithRetryAfter: 4},
	}}
	r.finish()
	if got := r.Class("a", "standard").TokenShare; got != 0.75 {
		t.Errorf("token share %v, want 0.75", got)
	}
	if len(r.Tenants) != 2 || r.Tenants[0].Served != 13 || r.Tenants[0].Abandoned != 2 || r.Tenants[1].Shed != 4 {
		t.Errorf("tenants %+v", r.Tenants)
	}
	if got := r.Class("a", "standard").TTFTP50; got != 2 {
		t.Errorf("TTFT p50 %v, want 2", got)
	}
	var buf bytes.Buffer
	if err := WriteOverloadTable(&buf, r); err != nil || !strings.Contains(buf.String(), "sheddable") {
		t.Errorf("table %q: %v", buf.String(), err)
	}
	buf.Reset()
	if err := WriteOverloadJSON(&buf, r); err != nil || !strings.Contains(buf.String(), `"ttft_p99_s": 0`) {
		t.Errorf("JSON (no sample must be 0, not NaN): %v\n%s", err, buf.String())
	}
	path := filepath.Join(t.TempDir(), "overload.png")
	if err := WriteOverloadPlots(path, r); err != nil {
		t.Fatal(err)
	}
	a, b := OverloadPlotPaths(path)
	for _, p := range []string{a, b} {
		data, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
			t.Errorf("%s: not a PNG (%v)", p, err)
		}
	}
}
