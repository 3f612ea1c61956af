package frontend

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkServerTiming checks that resp carries every stage of the hop, in
// order, each with a duration.
func checkServerTiming(t *testing.T, resp *http.Response) {
	t.Helper()
	st := resp.Header.Get("Server-Timing")
	parts := strings.Split(st, ", ")
	if len(parts) != int(numStages)-1 {
		t.Fatalf("Server-Timing = %q, want the %d stages", st, numStages-1)
	}
	for i, p := range parts {
		name, dur, ok := strings.Cut(p, ";dur=")
		ms, err := strconv.ParseFloat(dur, 64)
		if !ok || err != nil || name != stageNames[i+1] || ms < 0 {
			t.Errorf("Server-Timing part %d = %q, want %s;dur=<ms>", i, p, stageNames[i+1])
		}
	}
}

// A stage not reached is left out, and the next one counts from the last
// stage reached.
func TestTimingHeaderSkipsMissingStages(t *testing.T) {
	var tm timing
	t0 := time.Unix(100, 0)
	tm[stageStart] = t0
	tm[stageDecode] = t0.Add(1500 * time.Microsecond)
	tm[stageUpstream] = t0.Add(4 * time.Millisecond)
	if got, want := tm.header(), "decode;dur=1.500, upstream;dur=2.500"; got != want {
		t.Errorf("header = %q, want %q", got, want)
	}
}

// BenchmarkTimingHeader is the cost of the Server-Timing value per answer.
//
//	go test -run '^$' -bench TimingHeader ./internal/frontend
func BenchmarkTimingHeader(b *testing.B) {
	var tm timing
	t0 := time.Now()
	for s := range numStages {
		tm[s] = t0.Add(time.Duration(s) * 7 * time.Microsecond)
	}
	b.ReportAllocs()
	for range b.N {
		_ = tm.header()
	}
}
