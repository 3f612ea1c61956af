package sim

import (
	"reflect"
	"runtime"
	"runtime/debug"
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
	out, calls, events, _ := runCoreOpts(t, horizonStep, reqs, 4096, false)
	return out, calls, events
}

// runCoreOpts is runCoreReqs on a cache of the given blocks; with recycle,
// it hands every published event back (Core.RecycleEvents) once copied. It
// also returns how many events reused the hash list of an earlier one.
func runCoreOpts(t *testing.T, horizonStep time.Duration, reqs []Request, blocks int, recycle bool) (map[int]Result, int, []kvevents.Event, int) {
	t.Helper()
	var events []kvevents.Event
	var c *Core
	lists := map[*uint64]bool{} // the backing arrays of published hash lists
	reused := 0
	c, err := NewCore(Config{KVBlocks: blocks, Publisher: PublisherFunc(func(ev []kvevents.Event) {
		for _, e := range ev {
			if cap(e.Hashes) > 0 {
				p := &e.Hashes[:1][0]
				if lists[p] {
					reused++
				}
				lists[p] = true
			}
			e.Hashes = slices.Clone(e.Hashes)
			events = append(events, e)
		}
		if recycle {
			c.RecycleEvents(ev)
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
	return out, calls, events, reused
}

// Handing published events back (as the simulator does) changes nothing:
// the same results and the same KV events, evictions included, while later
// events fill the handed-back hash lists.
func TestCoreRecycleEventsEqualFresh(t *testing.T) {
	// 96 blocks for prompts of 19 to 32 blocks plus outputs: the cache
	// evicts.
	fresh, _, freshEv, freshReused := runCoreOpts(t, 0, coreRequests(), 96, false)
	recycled, _, recycledEv, reused := runCoreOpts(t, 0, coreRequests(), 96, true)
	if !reflect.DeepEqual(recycled, fresh) {
		t.Errorf("results differ with events recycled")
	}
	if !reflect.DeepEqual(recycledEv, freshEv) {
		t.Errorf("KV events differ with events recycled: %d events, %d fresh", len(recycledEv), len(freshEv))
	}
	removed := 0
	for _, e := range freshEv {
		if e.Kind == kvevents.Removed {
			removed++
		}
	}
	if removed == 0 {
		t.Errorf("no Removed event: the test cache does not evict")
	}
	if freshReused != 0 || reused == 0 {
		t.Errorf("events reusing an earlier hash list: %d fresh, %d recycled; want 0 and some", freshReused, reused)
	}
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

// Recycled token buffers change nothing: a run that recycles every finished
// sequence gives the same results as one that does not, and a buffer handed
// back serves a later request of its size class.
func TestCoreRecycle(t *testing.T) {
	for n := 4; n < 1<<22; n = n*9/8 + 1 {
		c := classOf(n)
		if classCap(c) > n || classCap(c+1) <= n {
			t.Fatalf("classOf(%d) = %d: capacities [%d, %d)", n, c, classCap(c), classCap(c+1))
		}
	}
	reqs := coreRequests()
	for i := range reqs {
		reqs[i].Tokens = append(reqs[i].Tokens, make([]uint32, 1200)...) // big enough to pool
	}
	run := func(recycle bool) map[int]Result {
		c, err := NewCore(Config{KVBlocks: 4096}, true)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]Result{}
		for _, r := range reqs {
			if _, err := c.Add(r, c.Clock()); err != nil {
				t.Fatal(err)
			}
			for !c.Idle() {
				_, dels := c.Advance(time.Hour)
				for _, d := range dels {
					if d.Done {
						out[d.H.Tag()] = d.H.Result()
						if recycle {
							c.Recycle(d.H)
						}
					}
				}
			}
		}
		return out
	}
	plain, recycled := run(false), run(true)
	if !reflect.DeepEqual(recycled, plain) {
		t.Errorf("results differ when token buffers are recycled")
	}
	if len(plain) != len(reqs) {
		t.Fatalf("%d results for %d requests", len(plain), len(reqs))
	}
	// Served from the pool, a same-sized request allocates far less than
	// its 80 KB buffer. (Averaged over many: a goroutine that moves to
	// another P between Put and Get misses the private pool slot.)
	if raceEnabled {
		return // sync.Pool drops items at random under the race detector
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection empties the pools
	c, err := NewCore(Config{KVBlocks: 4096}, false)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]uint32, 20000)
	for i := range big {
		big[i] = uint32(i)
	}
	cycle := func() {
		h, err := c.Add(Request{Tokens: big, MaxTokens: 4}, c.Clock())
		if err != nil {
			t.Fatal(err)
		}
		for !c.Idle() {
			c.Advance(time.Hour)
		}
		c.Recycle(h)
		if h.s.tokens != nil || h.s.hashes != nil || h.s.blocks != nil {
			t.Fatal("Recycle kept a buffer of the finished sequence")
		}
	}
	cycle()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const cycles = 50
	for range cycles {
		cycle()
	}
	runtime.ReadMemStats(&after)
	// Its hash list alone (8 bytes a block) is 10 KB, its block list 5 KB.
	if per := (after.TotalAlloc - before.TotalAlloc) / cycles; per > 8*uint64(len(big)/16)/2 {
		t.Errorf("a recycled request allocates %d bytes, want well under its %d-byte token buffer and %d-byte hash list", per, 4*len(big), 8*len(big)/16)
	}
}

// TestCoreQueuedAtHoldsPlace: a decode leg added after its KV was pulled
// takes its place in the waiting queue from Request.QueuedAt, ahead of a
// request that arrived during the pull, as vLLM's queue holds it
// (WAITING_FOR_REMOTE_KVS); without QueuedAt it queues behind.
func TestCoreQueuedAtHoldsPlace(t *testing.T) {
	prompt := func(n, seed int) []uint32 {
		toks := make([]uint32, n)
		for i := range toks {
			toks[i] = uint32(1000 + (i*13+seed*7919)%5000)
		}
		return toks
	}
	for _, tc := range []struct {
		name      string
		queuedAt  time.Duration
		wantAhead bool
	}{
		{"queued before the other arrival", 500 * time.Microsecond, true},
		{"no QueuedAt", 0, false},
		{"QueuedAt after the other arrival", 1500 * time.Microsecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewCore(Config{KVBlocks: 4096, MaxNumBatchedTokens: 256}, false)
			if err != nil {
				t.Fatal(err)
			}
			// a occupies the step budget; b arrives at 1 ms and c, pulled
			// since tc.queuedAt, at 2 ms.
			reqs := []struct {
				r  Request
				at time.Duration
			}{
				{Request{Tokens: prompt(2000, 1), MaxTokens: 2, Tag: 0}, 0},
				{Request{Tokens: prompt(1000, 2), MaxTokens: 2, Tag: 1}, time.Millisecond},
				{Request{Tokens: prompt(100, 3), MaxTokens: 2, Tag: 2, QueuedAt: tc.queuedAt}, 2 * time.Millisecond},
			}
			first := map[int]time.Duration{}
			for _, q := range reqs {
				if _, err := c.Add(q.r, q.at); err != nil {
					t.Fatal(err)
				}
			}
			for !c.Idle() {
				dt, dels := c.Advance(1<<62 - 1)
				if dt == 0 {
					t.Fatal("core stalled")
				}
				for _, d := range dels {
					if d.First {
						first[d.H.Tag()] = d.At
					}
				}
			}
			if got := first[2] < first[1]; got != tc.wantAhead {
				t.Errorf("c's first token at %v, b's at %v: c ahead = %v, want %v", first[2], first[1], got, tc.wantAhead)
			}
		})
	}
}
