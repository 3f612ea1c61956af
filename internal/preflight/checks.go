package preflight

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bench"
)

// Prompt ids keep each check's prompts apart within a run; the seed keeps
// runs apart.
const (
	idEvents  = 1_000
	idPrefix  = 2_000
	idRouting = 3_000
)

// eventsProbeBlocks is the size of a KV-event probe: a few full blocks plus
// half a block, enough to see stored events without filling any cache.
const eventsProbeBlocks = 4

// warmRepeats is how many warm requests the same-prefix probe sends.
const warmRepeats = 2

// pollEvery is how often the index is polled while waiting for events.
const pollEvery = 25 * time.Millisecond

// runner holds one run's state. It is used by one goroutine.
type runner struct {
	cfg      Config
	c        *client
	pb       *bench.PromptBuilder
	progress io.Writer
	dep      Deployment
	bs       int // block size used for the math: /health's, else 16
}

// Run performs the checklist against cfg.URL and returns the report. It
// returns an error only when the deployment cannot be examined at all (bad
// config, frontend unreachable, /health unreadable); a check that cannot run
// is a FAIL in the report. progress receives one line per check as it starts
// (nil for none).
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if progress == nil {
		progress = io.Discard
	}
	if cfg.Seed == 0 {
		cfg.Seed = time.Now().UnixNano()
	}
	r := &runner{cfg: cfg, c: newClient(&cfg), pb: bench.NewPromptBuilder(cfg.Seed), progress: progress}
	defer r.c.close()
	rep := &Report{Schema: SchemaVersion, URL: cfg.URL, StartedAt: time.Now().UTC(), Verdict: Pass}
	start := time.Now()

	steps := []struct {
		name, what string
		run        func(context.Context) Check
	}{
		{CheckInventory, "reading /health", nil},
		{CheckTokenizer, "the same prompt and chat through the frontend's and each worker's tokenizer", r.checkTokenizer},
		{CheckEvents, "probing each worker's KV events", r.checkEvents},
		{CheckPrefix, "same-prefix TTFT probe on each serving worker", r.checkPrefix},
		{CheckRouting, "repeated-prefix workload through the router", r.checkRouting},
		{CheckAgreement, "each worker's cache hits against the index's predictions", r.checkAgreement},
		{CheckLinks, "probing prefill→decode links", r.checkLinks},
		{CheckDisagg, "disaggregation math", r.checkDisagg},
	}
	for i, s := range steps {
		fmt.Fprintf(progress, "preflight: [%d/%d] %s: %s\n", i+1, len(steps), s.name, s.what)
		var ch Check
		if s.run == nil {
			h, err := r.c.health(ctx)
			if err != nil {
				return nil, err
			}
			ch = r.inventory(h)
		} else {
			ch = s.run(ctx)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("preflight: interrupted during %s: %w", s.name, ctx.Err())
		}
		if ch.Problems == nil {
			ch.Problems = []string{}
		}
		if ch.Notes == nil {
			ch.Notes = []string{}
		}
		rep.Checks = append(rep.Checks, ch)
		rep.Verdict = worst(rep.Verdict, ch.Status)
	}
	rep.Deployment = r.dep
	rep.DurationS = time.Since(start).Seconds()
	return rep, nil
}

// inventory records the deployment and checks that every worker serves the
// same model with the same block size and KV layout, and that none was
// refused.
func (r *runner) inventory(h Deployment) Check {
	if m := r.cfg.Model; m != "" {
		// One model of a fleet: its workers are the deployment checked.
		h.Model = m
		h.Workers = slices.DeleteFunc(h.Workers, func(w Worker) bool { return w.Model != m })
		if len(h.Workers) > 0 && h.Workers[0].BlockSize > 0 {
			h.BlockSize = h.Workers[0].BlockSize
		}
	}
	r.dep = h
	if r.dep.Workers == nil {
		r.dep.Workers = []Worker{}
	}
	if r.dep.Refused == nil {
		r.dep.Refused = []Refusal{}
	}
	r.bs = h.BlockSize
	if r.bs <= 0 {
		r.bs = 16
	}
	r.c.model, r.c.fleet = h.Model, r.cfg.Model != ""
	inv := &Inventory{Workers: len(h.Workers), ByRole: map[string]int{}, ByModel: map[string]int{},
		BlockSizes: map[string]int{}, Refused: r.dep.Refused}
	ch := Check{Name: CheckInventory, Status: Pass, Inventory: inv}
	fail := func(format string, a ...any) {
		ch.Status = Fail
		ch.Problems = append(ch.Problems, fmt.Sprintf(format, a...))
	}
	if h.Model == "" && len(h.Models) > 1 {
		fail("the frontend serves %d models (%s): the checks are per model; run preflight --model NAME for each", len(h.Models), strings.Join(h.Models, ", "))
	}
	kvBytes := map[int64][]string{}
	for i := range r.dep.Workers {
		w := &r.dep.Workers[i]
		if w.Role == "" {
			w.Role = RoleAggregated
		}
		inv.ByRole[w.Role]++
		inv.ByModel[w.Model]++
		inv.BlockSizes[strconv.Itoa(w.BlockSize)]++
		switch w.Role {
		case RoleAggregated, RolePrefill, RoleDecode:
		default:
			fail("%s: unknown role %q", w.ID, w.Role)
		}
		if h.Model != "" && w.Model != "" && w.Model != h.Model {
			fail("%s: serves model %q, the frontend serves %q", w.ID, w.Model, h.Model)
		}
		if w.BlockSize != 0 && w.BlockSize != r.bs {
			fail("%s: block size %d, the frontend hashes %d-token blocks (prefix lookups would never match)", w.ID, w.BlockSize, r.bs)
		}
		if w.KVBytesPerToken > 0 {
			kvBytes[w.KVBytesPerToken] = append(kvBytes[w.KVBytesPerToken], w.ID)
		}
	}
	if len(kvBytes) > 1 {
		var parts []string
		for b, ids := range kvBytes {
			parts = append(parts, fmt.Sprintf("%d B/token on %s", b, strings.Join(ids, ",")))
		}
		sort.Strings(parts)
		fail("KV bytes per token differ between workers (%s): KV blocks cannot move between them", strings.Join(parts, "; "))
	}
	for _, rf := range r.dep.Refused {
		fail("%s: refused by the frontend: %s", rf.ID, rf.Reason)
	}
	if len(h.Workers) == 0 {
		fail("no workers registered")
	} else if inv.ByRole[RoleAggregated]+inv.ByRole[RoleDecode] == 0 {
		fail("only prefill workers: nothing can decode")
	}
	switch h.Status {
	case "ok":
	case "unavailable":
		fail("frontend status unavailable: %s", h.Reason)
	default:
		ch.Status = worst(ch.Status, Warn)
		ch.Problems = append(ch.Problems, fmt.Sprintf("frontend status %s: %s", h.Status, h.Reason))
	}
	ch.Summary = fmt.Sprintf("%d workers (%s); model %s; block %d; policy %s; disagg %s",
		len(h.Workers), countsLine(inv.ByRole), orDash(h.Model), r.bs, orDash(h.Policy), orDash(h.Disagg))
	if len(r.dep.Refused) > 0 {
		ch.Summary += fmt.Sprintf("; %d refused", len(r.dep.Refused))
	}
	return ch
}

// checkEvents pins a unique probe to each worker and watches the index and
// the event counters.
func (r *runner) checkEvents(ctx context.Context) Check {
	ch := Check{Name: CheckEvents, Status: Pass, Events: []EventsProbe{}}
	if len(r.dep.Workers) == 0 {
		ch.Status, ch.Summary = Fail, "no workers to probe"
		return ch
	}
	ok := 0
	for i, w := range r.dep.Workers {
		p := r.eventsProbe(ctx, i, w)
		ch.Events = append(ch.Events, p)
		ch.Status = worst(ch.Status, p.Status)
		if p.Status == Pass {
			ok++
			continue
		}
		ch.Problems = append(ch.Problems, eventsProblem(&p))
	}
	ch.Summary = fmt.Sprintf("%d/%d workers publish KV events (indexed within %gs, no gaps, heartbeat < %gs)",
		ok, len(r.dep.Workers), r.cfg.EventsDeadline.Seconds(), r.cfg.EventsDeadline.Seconds())
	var bad []string
	for _, p := range ch.Events {
		if p.Status != Pass {
			bad = append(bad, fmt.Sprintf("%s (%s)", p.Worker, p.State))
		}
	}
	if len(bad) > 0 {
		ch.Summary += "; not: " + strings.Join(bad, ", ")
	}
	return ch
}

func (r *runner) eventsProbe(ctx context.Context, i int, w Worker) EventsProbe {
	deadline := r.cfg.EventsDeadline
	p := EventsProbe{Worker: w.ID, Role: w.Role, Status: Pass, DeadlineS: deadline.Seconds(),
		ProbeTokens: eventsProbeBlocks*r.bs + r.bs/2, ProbeBlocks: eventsProbeBlocks}
	before, err := r.c.events(ctx)
	if err != nil {
		p.Status, p.ProbeErrorText = Fail, err.Error()
		return p
	}
	if st, ok := before[w.ID]; ok {
		p.GapsBefore = st.Gaps
	}
	prompt := r.pb.AppendUnique(nil, idEvents+i, p.ProbeTokens)
	resp, err := r.c.complete(ctx, prompt, w.ID, 2)
	if err != nil {
		p.Status, p.ProbeErrorText = Fail, err.Error()
	} else {
		p.ServedBy = resp.Worker
		end := time.Now()
		for {
			l, err := r.c.lookup(ctx, prompt)
			if err != nil {
				p.Status, p.ProbeErrorText = Fail, err.Error()
				break
			}
			if l.Blocks > 0 {
				p.ProbeBlocks = l.Blocks
			}
			p.IndexedBlocks = l.Overlaps[w.ID]
			if p.IndexedBlocks >= p.ProbeBlocks {
				s := time.Since(end).Seconds()
				p.IndexedAfterS = &s
				break
			}
			if time.Since(end) >= deadline {
				break
			}
			if !sleep(ctx, pollEvery) {
				break
			}
		}
	}
	after, err := r.c.events(ctx)
	if err != nil {
		p.Status = Fail
		if p.ProbeErrorText == "" {
			p.ProbeErrorText = err.Error()
		}
		return p
	}
	st, known := after[w.ID]
	if !known {
		p.Status, p.State = Fail, "unknown"
		p.Cause = "the frontend's event consumer does not know this worker"
		return p
	}
	p.State, p.Cause, p.Epoch, p.LastSeq, p.GapsAfter, p.LastEventAgeS = st.State, st.Cause, st.Epoch, st.LastSeq, st.Gaps, st.ageS()
	switch {
	case st.State != "healthy", p.IndexedAfterS == nil, p.GapsAfter > p.GapsBefore,
		p.LastEventAgeS < 0, p.LastEventAgeS >= deadline.Seconds():
		p.Status = Fail
	}
	return p
}

// eventsProblem says, in one line, why a worker's events failed.
func eventsProblem(p *EventsProbe) string {
	var why []string
	switch p.State {
	case "disabled":
		why = append(why, "KV events disabled")
	case "silent":
		why = append(why, "KV events silent")
	case "", "healthy":
	default:
		why = append(why, "KV events "+p.State)
	}
	if p.Cause != "" && p.State != "healthy" && len(why) > 0 {
		why[len(why)-1] += " (" + p.Cause + ")"
	}
	if p.ProbeErrorText != "" {
		why = append(why, "probe failed: "+p.ProbeErrorText)
	} else if p.IndexedAfterS == nil {
		why = append(why, fmt.Sprintf("probe's %d blocks not in the index after %gs (%d seen); the router cannot see this worker's cache",
			p.ProbeBlocks, p.DeadlineS, p.IndexedBlocks))
	}
	if p.GapsAfter > p.GapsBefore {
		why = append(why, fmt.Sprintf("%d sequence gaps during the check", p.GapsAfter-p.GapsBefore))
	}
	if p.State != "" && p.ProbeErrorText == "" && (p.LastEventAgeS < 0 || p.LastEventAgeS >= p.DeadlineS) {
		if p.Epoch == 0 && p.LastSeq == 0 {
			// Nothing stale about a stream that never started.
			why = append(why, "has never published a KV event")
		} else if p.LastEventAgeS < 0 {
			why = append(why, "no heartbeat age reported")
		} else {
			why = append(why, fmt.Sprintf("last event %.1fs ago (heartbeat stale)", p.LastEventAgeS))
		}
	}
	return p.Worker + ": " + strings.Join(why, "; ")
}

// checkPrefix sends the same prompt cold then warm to each serving worker.
func (r *runner) checkPrefix(ctx context.Context) Check {
	ch := Check{Name: CheckPrefix, Status: Pass, Prefix: []PrefixProbe{}}
	n := r.cfg.ProbeTokens
	// An engine always computes the last prompt token, so a block that ends
	// exactly at it cannot be served from cache.
	full := (n - 1) / r.bs * r.bs
	var skipped []string
	var ratios []float64
	for i, w := range r.dep.Workers {
		if w.Role == RolePrefill {
			skipped = append(skipped, w.ID)
			continue
		}
		p := PrefixProbe{Worker: w.ID, Role: w.Role, Status: Pass, PromptTokens: n, FullBlockTokens: full}
		prompt := r.pb.AppendUnique(nil, idPrefix+i, n)
		cold, err := r.c.complete(ctx, prompt, w.ID, 2)
		// Two warm requests; the faster one counts, so one scheduling hiccup
		// on a busy host cannot make a working cache look slow. Both must
		// find the prompt cached.
		var warm probe
		for j := 0; j < warmRepeats && err == nil; j++ {
			var again probe
			if again, err = r.c.complete(ctx, prompt, w.ID, 2); err != nil {
				break
			}
			if j == 0 {
				warm = again
				continue
			}
			warm.TTFTS = min(warm.TTFTS, again.TTFTS)
			warm.CachedTokens = min(warm.CachedTokens, again.CachedTokens)
		}
		var why []string
		if err != nil {
			p.Status, p.Error = Fail, err.Error()
			why = append(why, err.Error())
		} else {
			p.ColdTTFTS, p.WarmTTFTS, p.ColdCached, p.WarmCached = cold.TTFTS, warm.TTFTS, cold.CachedTokens, warm.CachedTokens
			if cold.TTFTS > 0 {
				p.WarmOverCold = warm.TTFTS / cold.TTFTS
				ratios = append(ratios, p.WarmOverCold)
			}
			if warm.CachedTokens < full {
				p.Status = Fail
				why = append(why, fmt.Sprintf("warm requests found %d cached tokens, want ≥ %d (the prompt's full blocks)", warm.CachedTokens, full))
			}
			if warm.TTFTS >= cold.TTFTS {
				p.Status = Fail
				why = append(why, fmt.Sprintf("warm TTFT %s not lower than cold %s", ms(warm.TTFTS), ms(cold.TTFTS)))
			}
			if cold.CachedTokens > 0 {
				ch.Notes = append(ch.Notes, fmt.Sprintf("%s: the cold request already found %d cached tokens", w.ID, cold.CachedTokens))
			}
			if cold.PromptTokens != n {
				ch.Notes = append(ch.Notes, fmt.Sprintf("%s: usage reports %d prompt tokens for a %d-token prompt", w.ID, cold.PromptTokens, n))
			}
		}
		if len(why) > 0 {
			ch.Problems = append(ch.Problems, w.ID+": "+strings.Join(why, "; "))
		}
		ch.Status = worst(ch.Status, p.Status)
		ch.Prefix = append(ch.Prefix, p)
	}
	if len(skipped) > 0 {
		ch.Notes = append(ch.Notes, "prefill-role workers skipped (they never serve a first token to clients): "+strings.Join(skipped, ", "))
	}
	switch {
	case len(ch.Prefix) == 0:
		ch.Status, ch.Summary = Fail, "no aggregated or decode worker to probe"
	default:
		good := 0
		for _, p := range ch.Prefix {
			if p.Status == Pass {
				good++
			}
		}
		ch.Summary = fmt.Sprintf("%d/%d workers serve a %d-token prompt from cache; warm/cold TTFT %s",
			good, len(ch.Prefix), n, ratioRange(ratios))
	}
	return ch
}

// checkRouting warms a few prefixes, waits for the index to see them, then
// sends requests with unique suffixes through the router and counts hits.
func (r *runner) checkRouting(ctx context.Context) Check {
	cfg := &r.cfg
	shared := cfg.RoutingPrefixTokens / r.bs * r.bs
	res := &RoutingResult{Policy: r.dep.Policy, Prefixes: cfg.RoutingPrefixes, PrefixTokens: cfg.RoutingPrefixTokens,
		SuffixTokens: cfg.RoutingSuffixTokens, SharedBlockTokens: shared, Requests: cfg.RoutingRequests,
		ExpectedHitRatio: 1, MinHitRatio: cfg.MinHitRatio, Workers: map[string]int{}}
	ch := Check{Name: CheckRouting, Status: Pass, Routing: res}
	if shared == 0 {
		ch.Status, ch.Summary = Fail, fmt.Sprintf("prefix of %d tokens has no full %d-token block", cfg.RoutingPrefixTokens, r.bs)
		return ch
	}
	prefixes := make([][]uint32, cfg.RoutingPrefixes)
	for k := range prefixes {
		prefixes[k] = r.pb.AppendPrefix(nil, idRouting+k, cfg.RoutingPrefixTokens)
	}
	prompt := func(k, i int) []uint32 {
		return r.pb.AppendSuffix(append([]uint32(nil), prefixes[k]...), idRouting+i, cfg.RoutingSuffixTokens)
	}
	for k := range prefixes {
		if _, err := r.c.complete(ctx, prompt(k, k), "", 2); err != nil {
			ch.Status, ch.Summary = Fail, "warm-up failed"
			ch.Problems = append(ch.Problems, err.Error())
			return ch
		}
	}
	// The router can only use what the index knows: wait (bounded) until
	// each warmed prefix shows on some worker.
	want := shared / r.bs
	start := time.Now()
	for k := range prefixes {
		for {
			l, err := r.c.lookup(ctx, prefixes[k])
			if err != nil {
				ch.Notes = append(ch.Notes, "index lookup failed: "+err.Error())
				break
			}
			if maxOverlap(l.Overlaps) >= want {
				res.IndexedPrefixes++
				break
			}
			if time.Since(start) >= cfg.EventsDeadline || !sleep(ctx, pollEvery) {
				break
			}
		}
	}
	if res.IndexedPrefixes < len(prefixes) {
		ch.Notes = append(ch.Notes, fmt.Sprintf("only %d/%d warmed prefixes appeared in the index within %gs", res.IndexedPrefixes, len(prefixes), cfg.EventsDeadline.Seconds()))
	}
	policies := map[string]int{}
	var ttft float64
	errs := 0
	var tierPrompt int
	var tierTokens [3]int
	var loaded [3]int64
	tierTTFT, tierN := map[string]float64{}, map[string]int{}
	// Prefixes are drawn at random (seeded), not in rotation: a rotation
	// can line up with a round-robin router and score it perfect.
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed))
	for i := 0; i < cfg.RoutingRequests; i++ {
		resp, err := r.c.complete(ctx, prompt(rng.IntN(len(prefixes)), len(prefixes)+i), "", 2)
		if err != nil {
			if errs++; errs <= 3 {
				ch.Problems = append(ch.Problems, fmt.Sprintf("request %d: %v", i, err))
			}
			continue
		}
		res.OK++
		ttft += resp.TTFTS
		res.Workers[orDash(resp.Worker)]++
		if resp.Policy != "" {
			policies[resp.Policy]++
		}
		if resp.CachedTokens >= shared {
			res.Hits++
		}
		if t := resp.KVTiers; t != nil {
			tierPrompt += resp.PromptTokens
			tierTokens[0], tierTokens[1], tierTokens[2] = tierTokens[0]+t.GPUTokens, tierTokens[1]+t.CPUTokens, tierTokens[2]+t.DiskTokens
			loaded[1], loaded[2] = loaded[1]+t.CPULoadedBytes, loaded[2]+t.DiskLoadedBytes
			k := "miss"
			switch {
			case t.DiskTokens > 0:
				k = "disk"
			case t.CPUTokens > 0:
				k = "cpu"
			case t.GPUTokens > 0:
				k = "gpu"
			}
			tierTTFT[k] += resp.TTFTS
			tierN[k]++
		}
	}
	if res.OK > 0 {
		res.MeanTTFTS = ttft / float64(res.OK)
	}
	if len(tierN) > 0 {
		rt := &RoutingTiers{HitRatio: map[string]float64{}, LoadedBytes: map[string]int64{"cpu": loaded[1], "disk": loaded[2]}, MeanTTFTS: map[string]float64{}}
		for i, name := range []string{"gpu", "cpu", "disk"} {
			if tierPrompt > 0 {
				rt.HitRatio[name] = float64(tierTokens[i]) / float64(tierPrompt)
			}
		}
		for k, n := range tierN {
			rt.MeanTTFTS[k] = tierTTFT[k] / float64(n)
		}
		res.Tiers = rt
		ch.Notes = append(ch.Notes, fmt.Sprintf("by KV tier: hit ratio gpu %.2f, cpu %.2f, disk %.2f; loaded %.1f MB from cpu, %.1f MB from disk",
			rt.HitRatio["gpu"], rt.HitRatio["cpu"], rt.HitRatio["disk"], float64(loaded[1])/1e6, float64(loaded[2])/1e6))
	}
	if p := mostCommon(policies); p != "" {
		res.Policy = p
	}
	res.HitRatio = float64(res.Hits) / float64(res.Requests)
	switch {
	case res.HitRatio < cfg.MinHitRatio:
		ch.Status = Fail
		msg := fmt.Sprintf("hit ratio %.2f below --min-hit-ratio %.2f: repeated prefixes are not routed to the worker that caches them", res.HitRatio, cfg.MinHitRatio)
		if res.Policy != "kv" {
			msg += fmt.Sprintf(" (policy %q is not cache-aware; run the frontend with --router kv)", res.Policy)
		}
		ch.Problems = append(ch.Problems, msg)
	case res.HitRatio < res.ExpectedHitRatio:
		ch.Status = Warn
		ch.Problems = append(ch.Problems, fmt.Sprintf("hit ratio %.2f below the expected %.2f", res.HitRatio, res.ExpectedHitRatio))
	}
	if res.Policy != "kv" {
		ch.Notes = append(ch.Notes, fmt.Sprintf("policy %q: the expected 1.0 holds for the kv policy only", res.Policy))
	}
	ch.Summary = fmt.Sprintf("policy %s: %d/%d requests hit their %d-token prefix (ratio %.2f, expected %.2f, fail below %.2f); workers %s",
		orDash(res.Policy), res.Hits, res.Requests, shared, res.HitRatio, res.ExpectedHitRatio, cfg.MinHitRatio, countsLine(res.Workers))
	return ch
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func maxOverlap(m map[string]int) int {
	best := 0
	for _, v := range m {
		best = max(best, v)
	}
	return best
}

func mostCommon(m map[string]int) string {
	best, n := "", 0
	for k, v := range m {
		if v > n || (v == n && k < best) {
			best, n = k, v
		}
	}
	return best
}
