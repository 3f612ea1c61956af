package sim

import (
	"context"
	"slices"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// scheduled is one sequence's share of a step.
type scheduled struct {
	s *seq
	n int // tokens computed this step
}

// delivery is what a step makes visible to a sequence's reader.
type delivery struct {
	s       *seq
	visible int
	done    bool
}

// stepState is reused across steps so a step allocates nothing once warm.
type stepState struct {
	src   []kvevents.Tier // a waiting sequence's prefix match, by block
	batch []scheduled
	dels  []delivery
	out   []Delivery // Core.Advance's answer
}

// step plans one batch, advances the clock by its modelled time, applies it
// (blocks committed, tokens generated, finished sequences freed) and
// publishes its events. It returns the step's simulated duration, or 0 when
// there was nothing to run. A live Engine's callers hold its mu.
func (e *Core) step(st *stepState) time.Duration {
	st.batch, st.dels = st.batch[:0], st.dels[:0]
	budget := e.cfg.MaxNumBatchedTokens
	var work perfmodel.Work
	preempted := false
	e.bm.now = e.clock

	// Running sequences first, in arrival order: decodes take one token,
	// unfinished prefills take what the budget leaves (chunked prefill).
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		if s.loadUntil > e.clock {
			continue // its prefix is still loading from a lower tier
		}
		if len(s.loading) > 0 {
			e.loadLanded(s)
		}
		n := min(len(s.tokens)-s.computed, budget)
		need := ceilDiv(s.computed+n, e.bs) - len(s.blocks)
		for need > e.bm.available() && len(e.running) > i {
			// Out of blocks: preempt the latest arrival (maybe s itself)
			// and recompute it later.
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
		}
		if len(e.running) <= i {
			break // s itself was preempted
		}
		for range need {
			b, _ := e.bm.allocate()
			s.blocks = append(s.blocks, b)
		}
		st.batch = append(st.batch, scheduled{s, n})
		work.Add(n, s.computed)
		budget -= n
	}

	// Then admit waiting sequences, unless this step had to preempt.
	for !preempted && budget > 0 && len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		s := e.waiting[0]
		e.extendHashes(s)
		st.src = e.bm.match(s.hashes, st.src)
		hit, tiers := e.worthLoading(st.src, len(s.tokens))
		if hit*e.bs == len(s.tokens) {
			hit-- // the last token must run to produce logits
			tiers[st.src[hit]]--
		}
		src := st.src[:hit]
		lower := hit - tiers[kvevents.TierGPU]
		n := min(len(s.tokens)-hit*e.bs, budget)
		need := ceilDiv(hit*e.bs+n, e.bs) - hit
		if need+lower > e.bm.available()-e.bm.evictableGPU(s.hashes[:hit], src) {
			break // wait for blocks to free up
		}
		// Pin the lower-tier copies and take the GPU-cached blocks before
		// allocating: allocation evicts and offloads, which must touch
		// neither.
		ready := e.clock
		for i, h := range s.hashes[:hit] {
			if src[i] != kvevents.TierGPU {
				t := e.bm.lowerTier(src[i])
				t.ref(h)
				t.hits++
				ready = max(ready, t.entries[h].readyAt)
				s.loading = append(s.loading, tierRef{t, h, i})
			}
		}
		for i, h := range s.hashes[:hit] {
			b := int32(noBlock)
			if src[i] == kvevents.TierGPU {
				b = e.bm.acquireCached(h)
			}
			s.blocks = append(s.blocks, b)
		}
		for i := range src {
			if src[i] != kvevents.TierGPU {
				s.blocks[i], _ = e.bm.allocate()
			}
		}
		s.loadUntil = 0
		if lower > 0 {
			cpu, disk := tiers[kvevents.TierCPU]*e.bs, tiers[kvevents.TierDisk]*e.bs
			s.loadUntil = max(e.bm.loadFree, ready) + perfmodel.LoadTime(&e.profile, perfmodel.TierCPU, cpu) +
				perfmodel.LoadTime(&e.profile, perfmodel.TierDisk, disk)
			e.bm.loadFree = s.loadUntil
			e.metrics.loaded(kvevents.TierCPU, cpu*e.KVBytesPerToken())
			e.metrics.loaded(kvevents.TierDisk, disk*e.KVBytesPerToken())
		}
		for range need {
			b, _ := e.bm.allocate()
			s.blocks = append(s.blocks, b)
		}
		s.computed, s.committed = hit*e.bs, hit
		if !s.everRun {
			s.everRun = true
			s.cached = hit * e.bs
			for t := range tiers {
				s.tierTokens[t] = tiers[t] * e.bs
			}
			if lower > 0 {
				s.loadTime = s.loadUntil - e.clock
			}
			s.scheduled = e.clock
			e.metrics.prefixLookup(s.promptLen, s.tierTokens)
		}
		e.waiting = e.waiting[1:]
		s.state = stateRunning
		e.running = append(e.running, s)
		if s.loadUntil > e.clock {
			continue // computes once its prefix is loaded
		}
		st.batch = append(st.batch, scheduled{s, n})
		work.Add(n, s.computed)
		budget -= n
	}

	if len(st.batch) == 0 {
		e.publish() // preemption alone can evict nothing, but keep it tidy
		if next := e.nextLoad(); next > e.clock {
			// Nothing to compute until a load lands: the step is the wait.
			dt := next - e.clock
			e.clock = next
			return dt
		}
		return 0
	}
	dt := perfmodel.StepTime(&e.profile, work)
	e.clock += dt
	e.steps++

	for _, b := range st.batch {
		s := b.s
		s.computed += b.n
		e.extendHashes(s)
		if n := s.computed/e.bs - s.committed; n > 1 {
			// A prefill chunk commits up to hundreds of blocks: load their
			// table slots together rather than one cache miss at a time.
			e.bm.byHash.prefetch(s.hashes[s.committed : s.computed/e.bs])
			e.bm.prefetchBlocks(s.blocks[s.committed : s.computed/e.bs])
		}
		for ; s.committed < s.computed/e.bs; s.committed++ {
			k := s.committed
			e.bm.commit(s.blocks[k], e.parentOf(s, k), s.hashes[k], s.tokens[k*e.bs:(k+1)*e.bs:(k+1)*e.bs], s.req.Salt)
		}
		if s.computed < len(s.tokens) {
			continue // a prefill chunk: no token yet
		}
		s.tokens = append(s.tokens, genToken(e.words, s.genSeed, s.outputs()))
		if s.outputs() == 1 {
			s.firstToken = e.clock
			e.metrics.ttft(s.firstToken - s.arrival)
		} else {
			e.metrics.itl(e.clock - s.lastToken)
			if e.recordGaps {
				s.gaps = append(s.gaps, float32((e.clock - s.lastToken).Seconds()))
			}
		}
		s.lastToken = e.clock
		done := s.outputs() >= s.limit
		if s.req.Stop != nil && s.outputs() >= s.req.MinTokens && s.req.Stop(s.tokens[s.promptLen:]) {
			done, s.finish = true, "stop" // a stop sequence wins over length, as in vLLM
		}
		if done {
			e.finish(s)
		}
		st.dels = append(st.dels, delivery{s, s.outputs(), done})
	}
	if len(st.dels) > 0 {
		// Finished sequences were removed from running out of order.
		e.running = slices.DeleteFunc(e.running, func(s *seq) bool { return s.state == stateDone })
	}
	e.publish()
	return dt
}

// preempt frees a running sequence's blocks and puts it at the head of the
// waiting queue; it recomputes its prompt and outputs so far when
// readmitted. Callers hold e.mu.
func (e *Core) preempt(s *seq) {
	e.freeBlocks(s)
	s.state = stateWaiting
	s.preemptions++
	e.metrics.preempted()
	e.waiting = slices.Insert(e.waiting, 0, s)
}

// finish completes a sequence: it pins the prompt's blocks for a prefill
// request, then releases its own. Callers hold e.mu and remove s from
// running.
func (e *Core) finish(s *seq) {
	s.state = stateDone
	s.finishedAt = e.clock
	if s.req.Pin {
		full := s.promptLen / e.bs
		p := &PinnedSet{Parent: kvindex.Root(s.req.Salt), c: e}
		for _, h := range s.hashes[:full] {
			if !e.bm.byHash.has(h, e.bm.blocks) {
				break // a duplicate block whose twin was evicted: pin the prefix
			}
			p.blocks = append(p.blocks, e.bm.acquireCached(h))
			p.Hashes = append(p.Hashes, h)
		}
		s.pinned = p
	}
	e.freeBlocks(s)
	e.metrics.finished()
}

// extendHashes hashes every full block of s.tokens not hashed yet.
func (e *Core) extendHashes(s *seq) {
	for k := len(s.hashes); (k+1)*e.bs <= len(s.tokens); k++ {
		s.hashes = append(s.hashes, kvindex.HashBlock(e.parentOf(s, k), s.tokens[k*e.bs:(k+1)*e.bs]))
	}
}

func (e *Core) parentOf(s *seq, k int) uint64 {
	if k == 0 {
		return kvindex.Root(s.req.Salt)
	}
	return s.hashes[k-1]
}

// Run drives the scheduler until ctx is done, then aborts every request
// still queued or running and returns nil. Call it once.
func (e *Engine) Run(ctx context.Context) error {
	var st stepState
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		e.mu.Lock()
		dt := e.step(&st)
		if dt == 0 {
			if len(e.waiting) == 0 && len(e.running) == 0 {
				e.busy = false
				e.wallAnchor, e.simAnchor = time.Now(), e.clock
			}
			e.mu.Unlock()
			select {
			case <-ctx.Done():
				e.stop()
				return nil
			case <-e.wake:
			}
			continue
		}
		deadline := e.wallAnchor.Add(e.simToWall(e.clock - e.simAnchor))
		e.mu.Unlock()
		if wait := time.Until(deadline); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				e.stop()
				return nil
			case <-timer.C:
			}
		}
		e.metrics.lagged(time.Since(deadline))
		e.mu.Lock()
		for _, d := range st.dels {
			d.s.visible = max(d.s.visible, d.visible)
			d.s.visibleDone = d.s.visibleDone || d.done
			select {
			case d.s.notify <- struct{}{}:
			default:
			}
		}
		e.mu.Unlock()
	}
}

// stop aborts everything and refuses new work.
func (e *Engine) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = true
	for _, s := range append(e.waiting, e.running...) {
		if s.state == stateRunning {
			e.freeBlocks(s)
		}
		s.state = stateDone
		s.err = ErrStopped
		s.visibleDone = true
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
	e.waiting, e.running = nil, nil
	e.publish()
}
