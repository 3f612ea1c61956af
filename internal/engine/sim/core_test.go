package sim

import (
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
)

func coreRequests() []Request {
	var reqs []Request
	for i := range 6 {
		toks := make([]uint32, 300+40*i)
		for j := range toks {
			toks[j] = uint32(1000 + (j*7+i*(j/200))%5000) // requests share their first 200 tokens
		}
		reqs = append(reqs, Request{ID: "r", Tokens: toks, MaxTokens: 20 + 15*i, Tag: i})
	}
	return reqs
}

// runCore adds reqs at 5 ms intervals and advances with the given horizon
// step (0: stop after every step), returning each tag's result.
func runCore(t *testing.T, horizonStep time.Duration) (map[int]Result, int) {
	t.Helper()
	var events int
	c, err := NewCore(Config{KVBlocks: 4096, Publisher: PublisherFunc(func(ev []kvevents.Event) { events += len(ev) })}, true)
	if err != nil {
		t.Fatal(err)
	}
	reqs := coreRequests()
	out := map[int]Result{}
	next := 0
	calls := 0
	for len(out) < len(reqs) {
		// Add every request that has arrived by the core's clock.
		for next < len(reqs) && time.Duration(next)*5*time.Millisecond <= c.Clock() {
			if _, err := c.Add(reqs[next], time.Duration(next)*5*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			next++
		}
		horizon := c.Clock() + horizonStep
		if next < len(reqs) {
			horizon = min(horizon, time.Duration(next)*5*time.Millisecond)
		} else if horizonStep > 0 {
			horizon = time.Duration(1<<62 - 1)
		}
		dt, dels := c.Advance(horizon)
		calls++
		if dt == 0 {
			if next == len(reqs) {
				t.Fatalf("core idle with %d of %d results", len(out), len(reqs))
			}
			c.Add(reqs[next], time.Duration(next)*5*time.Millisecond)
			next++
			continue
		}
		for _, d := range dels {
			if d.Done {
				out[d.H.Tag()] = d.H.Result()
			}
		}
	}
	if !c.Idle() {
		t.Errorf("core not idle after every request finished")
	}
	if events == 0 {
		t.Errorf("no KV events published")
	}
	return out, calls
}

// A jump over an uninterrupted decode phase lands exactly where stepping
// one step per call does, in far fewer calls.
func TestCoreAdvanceJumpEqualsSteps(t *testing.T) {
	stepped, stepCalls := runCore(t, 0)
	jumped, jumpCalls := runCore(t, time.Hour)
	for tag, want := range stepped {
		got := jumped[tag]
		if got.TTFT != want.TTFT || got.E2E != want.E2E || got.CachedTokens != want.CachedTokens || len(got.Output) != len(want.Output) {
			t.Errorf("tag %d: jumped TTFT %v E2E %v cached %d out %d, stepped %v %v %d %d", tag,
				got.TTFT, got.E2E, got.CachedTokens, len(got.Output), want.TTFT, want.E2E, want.CachedTokens, len(want.Output))
		}
		if len(got.Gaps) != len(got.Output)-1 {
			t.Errorf("tag %d: %d gaps for %d tokens", tag, len(got.Gaps), len(got.Output))
		}
	}
	if jumpCalls*3 > stepCalls {
		t.Errorf("jumping took %d calls against %d step by step: decode phases are not advanced in one jump", jumpCalls, stepCalls)
	}
	if stepped[5].CachedTokens == 0 {
		t.Errorf("a request sharing a cached 200-token prefix hit nothing")
	}
}

func TestCorePinnedRelease(t *testing.T) {
	c, err := NewCore(Config{KVBlocks: 64}, false)
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]uint32, 160)
	for i := range toks {
		toks[i] = uint32(2000 + i)
	}
	if _, err := c.Add(Request{Tokens: toks, Pin: true}, 0); err != nil {
		t.Fatal(err)
	}
	_, dels := c.Advance(time.Hour)
	if len(dels) != 1 || !dels[0].Done || !dels[0].First {
		t.Fatalf("deliveries %+v: want one first-and-done", dels)
	}
	p := dels[0].H.Result().Pinned
	if p == nil || len(p.Hashes) != 10 {
		t.Fatalf("pinned %+v: want 10 blocks", p)
	}
	if got := c.Load().UsedBlocks; got != 10 {
		t.Errorf("used blocks %d while pinned, want 10", got)
	}
	p.Release()
	if got := c.Load().UsedBlocks; got != 0 {
		t.Errorf("used blocks %d after release, want 0", got)
	}
}
