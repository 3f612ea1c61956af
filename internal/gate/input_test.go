package gate

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
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

// TestQueueTimeSeparatePrompts checks that a queue is priced as the
// separate prompts it holds, not as one prompt of all their tokens, whose
// attention across prompts grows with the square of the queue: ten queued
// 20,000-token prompts on llama-3.1-70b cost ten of their prefills.
func TestQueueTimeSeparatePrompts(t *testing.T) {
	m70, _ := perfmodel.LookupModel("llama-3.1-70b")
	m06, _ := perfmodel.LookupModel("qwen3-0.6b")
	h100, _ := perfmodel.LookupGPU("h100")
	p70 := perfmodel.NewProfile(m70, h100, 4)
	p70.MaxBatchTokens = 8192
	p06 := perfmodel.NewProfile(m06, h100, 1)
	p06.MaxBatchTokens = 8192
	// 100 prompts of 200 tokens pack about 41 to a step of 8,192 tokens.
	var packed time.Duration
	for left := 100; left > 0; {
		var w perfmodel.Work
		for tok := 0; left > 0 && tok+200 <= 8192; tok += 200 {
			w.Add(200, 0)
			left--
		}
		packed += perfmodel.StepTime(&p06, w)
	}
	for _, tc := range []struct {
		name            string
		prof            *bus.Profile
		tokens, waiting int
		want            time.Duration
	}{
		{"ten long prompts", &p70, 200_000, 9, 10 * perfmodel.PrefillTime(&p70, 20_000, 0)},
		{"one prompt", &p70, 50_000, 0, perfmodel.PrefillTime(&p70, 50_000, 0)},
		{"short prompts share steps", &p06, 20_000, 99, packed},
	} {
		d := WorkerView{ID: "d", Profile: *tc.prof, BlockSize: 16, KVBytesPerToken: m70.KVBytesPerToken(),
			Load: &WorkerLoad{QueuedPrefillTokens: tc.tokens, Waiting: tc.waiting}}
		p := d
		p.ID = "p"
		in := InputFor(ModeAuto, 1000, 0, 0, d, p)
		for side, got := range map[string]time.Duration{"QueueD": in.QueueD, "QueueP": in.QueueP} {
			if r := float64(got) / float64(tc.want); r < 0.95 || r > 1.05 {
				t.Errorf("%s: %s %v, want %v ± 5%% (ratio %.2f)", tc.name, side, got, tc.want, r)
			}
		}
	}
}
