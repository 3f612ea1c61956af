package gate

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// TestInputForUnprofiledWorker checks a pair with a worker that registered
// no timing profile (a bridged engine without --gpu) stays local under auto
// with reason no_timing_profile, even over a measured fast link, and that
// its zero profile yields no nonsense times.
func TestInputForUnprofiledWorker(t *testing.T) {
	g := newGate(t, Config{Mode: ModeAuto})
	g.Links().ObserveProbe("p", "d", 10e9, time.Millisecond)
	m, _ := perfmodel.LookupModel("llama-3.1-8b")
	h100, _ := perfmodel.LookupGPU("h100")
	prof := perfmodel.NewProfile(m, h100, 1)
	load := &WorkerLoad{QueuedPrefillTokens: 4096, Running: 4, ActiveDecodeBlocks: 400}
	for _, tc := range []struct {
		name string
		d, p WorkerView
		want string
	}{
		{"decode unprofiled", WorkerView{ID: "d", BlockSize: 16, KVBytesPerToken: llamaKVBytes, Load: load}, WorkerView{ID: "p", Profile: prof, Load: load}, "d"},
		{"prefill unprofiled", WorkerView{ID: "d", Profile: prof, BlockSize: 16, KVBytesPerToken: llamaKVBytes, Load: load}, WorkerView{ID: "p", Load: load}, "p"},
	} {
		in := InputFor(ModeAuto, 8192, 0, 0, tc.d, tc.p)
		if in.Unpriced != tc.want {
			t.Errorf("%s: Unpriced %q, want %q", tc.name, in.Unpriced, tc.want)
		}
		d := g.Predict(in)
		if d.Choice != ChoiceLocal || d.Reason != ReasonNoProfile {
			t.Errorf("%s: %s (%s), want local (no_timing_profile)", tc.name, d.Choice, d.Reason)
		}
		if d.TLocal < 0 || d.TRemote < 0 || d.ITLD < 0 {
			t.Errorf("%s: negative prediction %s", tc.name, d)
		}
	}
	// With both profiles the same pair is priced (a fast link, an idle
	// prefill worker and a loaded decode worker: remote).
	in := InputFor(ModeAuto, 8192, 0, 0, WorkerView{ID: "d", Profile: prof, BlockSize: 16, KVBytesPerToken: llamaKVBytes, Load: load}, WorkerView{ID: "p", Profile: prof})
	if d := g.Predict(in); in.Unpriced != "" || d.Reason == ReasonNoProfile {
		t.Errorf("both profiled: %s, Unpriced %q", d, in.Unpriced)
	}
	if d := g.Predict(InputFor(ModeAlways, 8192, 0, 0, WorkerView{ID: "d"}, WorkerView{ID: "p"})); d.Choice != ChoiceRemote {
		t.Errorf("mode always without profiles: %s, want remote (the operator's word)", d)
	}
}
