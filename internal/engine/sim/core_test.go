package sim

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
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
	out, calls, _ := runCoreReqs(t, horizonStep, coreRequests())
	return out, calls
}

// runCoreReqs is runCore on reqs; it also returns every published event.
func runCoreReqs(t *testing.T, horizonStep time.Duration, reqs []Request) (map[int]Result, int, []kvevents.Event) {
	t.Helper()
	var events []kvevents.Event
	c, err := NewCore(Config{KVBlocks: 4096, Publisher: PublisherFunc(func(ev []kvevents.Event) {
		for _, e := range ev {
			e.Hashes = slices.Clone(e.Hashes)
			events = append(events, e)
		}
	})}, true)
	if err != nil {
		t.Fatal(err)
	}
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
	if len(events) == 0 {
		t.Errorf("no KV events published")
	}
	return out, calls, events
}

// Prompt hashes handed in with the request (as the simulator does) change
// nothing: the same results and the same KV events as the core hashing the
// prompt itself. Hashes of the wrong length are refused.
func TestCoreGivenHashesEqualOwn(t *testing.T) {
	own, _, ownEv := runCoreReqs(t, 0, coreRequests())
	reqs := coreRequests()
	for i := range reqs {
		reqs[i].Hashes = kvindex.HashChain(nil, "", reqs[i].Tokens, 16)
	}
	given, _, givenEv := runCoreReqs(t, 0, reqs)
	if !reflect.DeepEqual(given, own) {
		t.Errorf("results differ with the prompt hashes given")
	}
	if !reflect.DeepEqual(givenEv, ownEv) {
		t.Errorf("KV events differ with the prompt hashes given: %d events, %d hashing itself", len(givenEv), len(ownEv))
	}
	c, err := NewCore(Config{KVBlocks: 64}, false)
	if err != nil {
		t.Fatal(err)
	}
	bad := reqs[0]
	bad.Hashes = bad.Hashes[:len(bad.Hashes)-1]
	if _, err := c.Add(bad, 0); err == nil {
		t.Errorf("Add took %d hashes for a %d-token prompt", len(bad.Hashes), len(bad.Tokens))
	}
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
