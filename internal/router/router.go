package router

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/perfmodel"
)

// Config configures a Router. The zero value is valid: no index, the kv
// policy, α = 1.
type Config struct {
	// Index is the prefix index fed by KV events. Nil: overlaps come from
	// the approximate index alone, for every worker.
	Index *kvindex.Index
	// Policy is the starting policy; "" means kv.
	Policy string
	// Alpha weighs prefill against decode blocks in the kv cost; 0 means 1.
	Alpha float64
	// Seed seeds the random policy.
	Seed uint64
	// RotationStart is where the rotation of round-robin starts, and of
	// the tie-breaking of kv and least-loaded for prompts without a full
	// block; replicas of one deployment should differ.
	RotationStart uint64
	// ApproxTTL is how long a routing decision counts as cached on its
	// worker in the approximate index; 0 means 120 s. It should not exceed
	// how long a worker typically keeps an idle prefix cached.
	ApproxTTL time.Duration
	// ApproxCapacity bounds the approximate index, in block hashes; 0
	// means 1 Mi (about 100 MB at most, typically far less).
	ApproxCapacity int
	// NoApprox keeps no approximate index: for callers whose workers'
	// events are always healthy (switchyard simulate), where it would
	// never be read. Unhealthy workers then get no approximate overlap.
	NoApprox bool
	// ApproxOffPath leaves the record of a long prompt's decision (at
	// least offPathBlocks blocks) in the approximate index to the caller,
	// which calls Record once the request is on its way to its worker, in
	// the time the worker takes to answer: the record is a map write per
	// block, cache misses in a table of up to a million entries, and a
	// goroutine started for it had cost the request's path 15 us to wake
	// a thread. A Pick made meanwhile does not see it yet, which is the
	// index's approximation anyway (a concurrent Pick could as well have
	// come first). Simulate and tests record inline.
	ApproxOffPath bool
	// LoadReportTTL is how long a worker's load report corrects the
	// tracked load; 0 means 1 s (four missed 250 ms reports).
	LoadReportTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// TierBlind makes kv count blocks held only in a lower tier (host
	// memory, disk) as misses, as a router that ignores CPU-tier events
	// does; for comparison with the tier-priced default.
	TierBlind bool
	// AdapterLoad is what loading a LoRA adapter into a free slot adds to
	// a request's time to first token in the kv cost; 0 means 50 ms (an
	// adapter of tens of MB from host memory). AdapterSwap is the same for
	// a worker whose slots hold other adapters, which must wait for their
	// requests to end; 0 means 1 s, a typical request's decode.
	AdapterLoad, AdapterSwap time.Duration
}

// Router picks workers for requests under a policy that can be switched at
// run time, and tracks load and its own recent decisions. Safe for
// concurrent use.
type Router struct {
	index     *kvindex.Index
	tierBlind bool
	noApprox  bool
	offPath   bool
	now       func() time.Time
	approx    *approx
	load      *tracker
	policy    atomic.Pointer[Policy]
	byName    map[string]Policy // read-only after New
	names     []string
	m         *metrics
	pool      sync.Pool // *scratch
	// freshLookups makes every Pick look its candidates up by name, as if
	// it had never seen them: for tests that compare it with the cached
	// lookups.
	freshLookups bool
}

// New returns a Router.
func New(cfg Config) (*Router, error) {
	if cfg.Alpha < 0 {
		return nil, fmt.Errorf("router: alpha %v is negative", cfg.Alpha)
	}
	if cfg.ApproxTTL < 0 || cfg.ApproxCapacity < 0 || cfg.LoadReportTTL < 0 {
		return nil, fmt.Errorf("router: negative approx ttl, approx capacity or load report ttl")
	}
	if cfg.ApproxTTL == 0 {
		cfg.ApproxTTL = 120 * time.Second
	}
	if cfg.ApproxCapacity == 0 {
		cfg.ApproxCapacity = 1 << 20
	}
	if cfg.LoadReportTTL == 0 {
		cfg.LoadReportTTL = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Router{
		index:     cfg.Index,
		tierBlind: cfg.TierBlind,
		noApprox:  cfg.NoApprox,
		offPath:   cfg.ApproxOffPath,
		now:       cfg.Now,
		approx:    newApprox(cfg.ApproxTTL, cfg.ApproxCapacity),
		load:      newTracker(cfg.LoadReportTTL, cfg.Now),
		m:         newMetrics(),
	}
	r.pool.New = func() any { return new(scratch) }
	if cfg.AdapterLoad < 0 || cfg.AdapterSwap < 0 {
		return nil, fmt.Errorf("router: negative adapter load %v or swap %v", cfg.AdapterLoad, cfg.AdapterSwap)
	}
	if cfg.AdapterLoad == 0 {
		cfg.AdapterLoad = 50 * time.Millisecond
	}
	if cfg.AdapterSwap == 0 {
		cfg.AdapterSwap = time.Second
	}
	kv, rr, ll := &KV{Alpha: cfg.Alpha, AdapterLoad: cfg.AdapterLoad.Seconds(), AdapterSwap: cfg.AdapterSwap.Seconds()}, &RoundRobin{}, &LeastLoaded{}
	kv.rot.start, rr.rot.start, ll.rot.start = cfg.RotationStart, cfg.RotationStart, cfg.RotationStart
	ps := []Policy{kv, rr, NewRandom(cfg.Seed), ll}
	r.byName = make(map[string]Policy, len(ps))
	for _, p := range ps {
		r.byName[p.Name()] = p
		r.names = append(r.names, p.Name())
	}
	if cfg.Policy == "" {
		cfg.Policy = PolicyKV
	}
	if err := r.SetPolicy(cfg.Policy); err != nil {
		return nil, err
	}
	return r, nil
}

// Policies lists the policy names SetPolicy accepts.
func (r *Router) Policies() []string { return append([]string(nil), r.names...) }

// Policy returns the current policy's name.
func (r *Router) Policy() string { return (*r.policy.Load()).Name() }

// SetPolicy switches the policy for every later Pick.
func (r *Router) SetPolicy(name string) error {
	p, ok := r.byName[name]
	if !ok {
		return fmt.Errorf("router: unknown policy %q (known: %v)", name, r.names)
	}
	r.policy.Store(&p)
	return nil
}

// scratch is per-Pick working memory, pooled so a warm Pick allocates
// nothing.
type scratch struct {
	ws     []Worker
	blocks []int
	approx []bool
	tiers  []kvindex.TierCounts
	priced []float64
	est    []estimate
	timed  bool // every candidate has a timing profile: est is filled
	pr     pricer
	ov     kvindex.Overlaps
	res    resolved

	// indexBlocks is each candidate's overlap in the KV-event index before
	// the approximate index was consulted.
	indexBlocks []int
}

// resolved holds a scratch's lookups for the candidates it last served, by
// position: each one's tracker entry and index ID. A frontend's pools
// rarely change between requests, so a Pick from the same candidates
// reuses them while neither the tracker nor the index changed membership
// (their gens). Looking 1,000 candidates up by name on every Pick took a
// fifth of a 1,000-worker simulation's CPU.
type resolved struct {
	ids   []string
	loads []*workerLoad      // valid when tok and tgen is the tracker's gen
	xids  []kvindex.WorkerID // 0: unknown to the index; valid when xok and xgen is the index's gen
	tok   bool
	xok   bool
	tgen  uint64
	xgen  uint64
}

// prepare makes res describe ws, dropping its lookups if ws differs from
// the candidates they were made for.
func (res *resolved) prepare(ws []Worker) {
	if len(res.ids) == len(ws) {
		same := true
		for i := range ws {
			if ws[i].ID != res.ids[i] {
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	res.ids = res.ids[:0]
	for i := range ws {
		res.ids = append(res.ids, ws[i].ID)
	}
	res.tok, res.xok = false, false
}

// indexIDs returns the index ID of each candidate res was prepared for.
func (res *resolved) indexIDs(x *kvindex.Index) []kvindex.WorkerID {
	if g := x.Gen(); !res.xok || res.xgen != g {
		res.xids = res.xids[:0]
		for _, id := range res.ids {
			xid, _ := x.ID(id)
			res.xids = append(res.xids, xid)
		}
		res.xok, res.xgen = true, g
	}
	return res.xids
}

// Estimate implements Overlapper.
func (s *scratch) Estimate(i int) (ttft, decode float64, ok bool) {
	if !s.timed {
		return 0, 0, false
	}
	return s.est[i].ttft, s.est[i].decode, true
}

// Overlap implements Overlapper.
func (s *scratch) Overlap(i int) (int, bool) { return s.blocks[i], s.approx[i] }

// Priced implements Overlapper.
func (s *scratch) Priced(i int) float64 { return s.priced[i] }

// Tiers implements Overlapper.
func (s *scratch) Tiers(i int) kvindex.TierCounts { return s.tiers[i] }

// offPathBlocks is the shortest prompt, in blocks, whose decision
// ApproxOffPath records off the request's path: below it the record costs
// less than starting a goroutine.
const offPathBlocks = 32

// Pick chooses a worker among candidates for req under the current policy,
// books req on it when req.ID is set, records the decision in the
// approximate index (or, for a long prompt under ApproxOffPath, leaves that
// to Record) and counts it in metrics. The Load of each candidate is
// replaced by the router's tracked load; the caller's slice is not
// modified. Cost: one index lookup, one table lookup per block of unhealthy
// candidates' leading overlap, O(candidates).
//
// The booking counts req in its worker's load from the decision on,
// atomically with it: a concurrent Pick sees it. It is what Started would
// record for a request that prefills what the worker does not hold: the
// prompt's blocks less the overlap, and its whole prompt held. The caller
// must follow it with Started … Finished, or Release if the request never
// reaches the worker; a Pick without an ID books nothing.
func (r *Router) Pick(req *Request, candidates []Worker) (Decision, error) {
	if len(candidates) == 0 {
		return Decision{}, ErrNoWorkers
	}
	now := r.now()
	s := r.pool.Get().(*scratch)
	defer r.pool.Put(s)
	s.ws = append(s.ws[:0], candidates...)
	if r.freshLookups {
		s.res = resolved{}
	}
	s.res.prepare(s.ws)
	d, err := r.decide(s, req, now)
	if err != nil {
		return Decision{}, err
	}
	switch {
	case len(req.Hashes) == 0 || r.noApprox:
	case r.offPath && len(req.Hashes) >= offPathBlocks:
		d.deferred, d.at = true, now
	default:
		r.approx.record(d.Worker, req.Hashes, now)
	}
	r.m.observe(d, len(req.Hashes))
	return d, nil
}

// decide reads the candidates' loads, picks and books, under the
// tracker's lock.
func (r *Router) decide(s *scratch, req *Request, now time.Time) (Decision, error) {
	t := r.load
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fillResolved(s.ws, now, &s.res)
	if r.index != nil {
		for i, xid := range s.res.indexIDs(r.index) {
			s.ws[i].Load.CachedBlocks = r.index.HeldBlocks(xid)
		}
	}
	r.overlaps(s, req.Hashes, now)
	r.price(s, req)

	p := *r.policy.Load()
	if req.Policy != "" {
		// A model's own policy (the fleet config); New's caller checked
		// the name, and an unknown one keeps the policy in force.
		if mp, ok := r.byName[req.Policy]; ok {
			p = mp
		}
	}
	var d Decision
	var err error
	if req.Pin != "" {
		d, err = r.pinned(s, req.Pin, p.Name())
	} else {
		d, err = p.Pick(req, s.ws, s)
	}
	if err != nil {
		return d, err
	}
	d.IndexBlocks = d.OverlapBlocks
	if d.Approx {
		for i := range s.ws {
			if s.ws[i].ID == d.Worker {
				d.IndexBlocks = s.indexBlocks[i]
			}
		}
	}
	if req.ID == "" {
		return d, nil
	}
	prompt := len(req.Hashes)
	if req.BlockSize > 0 {
		prompt = max(prompt, (req.PromptTokens+req.BlockSize-1)/req.BlockSize)
	}
	t.book(d.Worker, req.ID, max(0, len(req.Hashes)-d.OverlapBlocks), prompt)
	return d, nil
}

func (r *Router) pinned(s *scratch, pin, policy string) (Decision, error) {
	for i := range s.ws {
		if s.ws[i].ID == pin {
			d := decision(s.ws, i, s, policy, ReasonPinned)
			return d, nil
		}
	}
	return Decision{}, fmt.Errorf("%w: %q", ErrPinNotCandidate, pin)
}

// overlaps fills s.blocks and s.approx for s.ws.
func (r *Router) overlaps(s *scratch, hashes []uint64, now time.Time) {
	n := len(s.ws)
	s.blocks = append(s.blocks[:0], make([]int, n)...)
	s.approx = append(s.approx[:0], make([]bool, n)...)
	s.tiers = append(s.tiers[:0], make([]kvindex.TierCounts, n)...)
	if len(hashes) == 0 {
		return
	}
	if r.index != nil {
		r.index.Overlaps(hashes, &s.ov)
		if hits := s.ov.Hits; len(hits) > 0 {
			if len(hits) <= 8 {
				for i := range s.ws {
					for _, h := range hits {
						if h.Worker == s.ws[i].ID {
							s.blocks[i], s.tiers[i] = h.Blocks, h.Tiers
						}
					}
				}
			} else {
				for i, id := range s.res.indexIDs(r.index) {
					if id != 0 {
						s.blocks[i], s.tiers[i] = s.ov.Blocks(id), s.ov.Tiers(id)
					}
				}
			}
		}
	}
	s.indexBlocks = append(s.indexBlocks[:0], s.blocks...)
	for i := range s.ws {
		if s.ws[i].EventsHealthy {
			continue
		}
		// The approximate index knows only where prompts went: it credits
		// them as GPU blocks. When it agrees with what the index still
		// holds from before the events went quiet, the overlap is the
		// approximate index's word all the same: the index's is stale.
		if a := r.approx.overlap(s.ws[i].ID, hashes, now); a > 0 && a >= s.blocks[i] {
			if a > s.blocks[i] {
				s.blocks[i] = a
				s.tiers[i] = kvindex.TierCounts{kvindex.TierGPU: int32(a)}
			}
			s.approx[i] = true
		}
	}
}

// price fills s.priced (each candidate's overlap in blocks as the block
// cost credits it) and, when every candidate has a timing profile, s.est
// (its predicted times; see the package doc).
func (r *Router) price(s *scratch, req *Request) {
	s.priced = s.priced[:0]
	s.est = s.est[:0]
	s.timed = req.BlockSize > 0
	for i := range s.ws {
		s.priced = append(s.priced, r.priced(&s.ws[i], s.tiers[i], req.PromptTokens, req.BlockSize))
		s.timed = s.timed && timed(s.ws[i].Profile)
	}
	if !s.timed {
		return
	}
	for i := range s.ws {
		s.est = append(s.est, s.pr.estimate(&s.ws[i], s.tiers[i], req.PromptTokens, req.OutputTokens, req.BlockSize, r.tierBlind))
	}
}

// priced returns the blocks of overlap tc is worth on w for a prompt of
// prompt tokens in blocks of bs: GPU blocks one each; the lower-tier ones
// together (recompute − load)/recompute each when loading them beats
// recomputing them on w's profile, and nothing otherwise, when tier-blind,
// or without a profile to price them by.
func (r *Router) priced(w *Worker, tc kvindex.TierCounts, prompt, bs int) float64 {
	gpu := float64(tc[kvindex.TierGPU])
	cpu, disk := int(tc[kvindex.TierCPU]), int(tc[kvindex.TierDisk])
	if cpu+disk == 0 || r.tierBlind || w.Profile == nil || bs <= 0 {
		return gpu
	}
	recompute, load := perfmodel.LowerTierSaving(w.Profile, max(prompt, (int(tc[kvindex.TierGPU])+cpu+disk)*bs),
		int(tc[kvindex.TierGPU])*bs, cpu*bs, disk*bs)
	if recompute <= 0 || load >= recompute {
		return gpu
	}
	return gpu + float64(cpu+disk)*(1-float64(load)/float64(recompute))
}

// Started records that a request with prefillBlocks prompt blocks to
// compute was sent to worker. Calls for one request on one worker come in
// the order Pick (optional), Started, FirstToken (at most once), Finished;
// unknown requests are ignored. A request may be in flight on several
// workers at once (a disaggregated one's decode and prefill workers).
//
// Started on a request Pick booked there confirms the booking, with the
// blocks given here: a decode worker whose prompt arrives by KV transfer
// has 0 to compute. A repeated Started updates them likewise, until the
// first token.
//
// promptBlocks is what the request holds on the worker while it decodes,
// cached prefix included: the worker's load reports count that, so it is
// what comes off a report that predates the request's end. The tracked load
// itself counts only prefillBlocks (see the package doc).
func (r *Router) Started(worker, requestID string, prefillBlocks, promptBlocks int) {
	r.load.started(worker, requestID, prefillBlocks, promptBlocks)
}

// FirstToken records that the request's prefill is done: its blocks move
// from queued prefill to active decode.
func (r *Router) FirstToken(worker, requestID string) { r.load.firstToken(worker, requestID) }

// Finished records that the request is done.
func (r *Router) Finished(worker, requestID string) { r.load.finished(worker, requestID) }

// Dropped forgets a request without counting it as finished: for requests
// of another frontend replica that went away, whose load reports may still
// count them or not.
func (r *Router) Dropped(worker, requestID string) { r.load.dropped(worker, requestID) }

// Release takes back a request Pick booked on worker that was never sent
// there: the router chose another path, or the request failed or was
// abandoned before it. Unlike Finished it does not correct the worker's load
// reports, which never counted it. Releasing an unknown or finished request
// does nothing.
func (r *Router) Release(worker, requestID string) { r.load.dropped(worker, requestID) }

// InFlight returns how many requests the router holds in flight, over
// all workers: booked or started, not yet finished, released or dropped
// (a request on two workers counts twice).
func (r *Router) InFlight() int {
	r.load.mu.Lock()
	defer r.load.mu.Unlock()
	return len(r.load.reqs)
}

// Record records a decision Pick left to its caller (ApproxOffPath) in
// the approximate index; for any other decision it does nothing. hashes
// are the request's, unchanged since Pick. Call it once per decision.
func (r *Router) Record(d Decision, hashes []uint64) {
	if d.deferred {
		r.approx.record(d.Worker, hashes, d.at)
	}
}

// RecordApprox records, in the approximate index, that hashes were sent to
// worker at at: a decision another frontend replica made.
func (r *Router) RecordApprox(worker string, hashes []uint64, at time.Time) {
	if len(hashes) > 0 && !r.noApprox {
		r.approx.record(worker, hashes, at)
	}
}

// ApproxTTL is how long a decision stays in the approximate index.
func (r *Router) ApproxTTL() time.Duration { return r.approx.ttl }

// ObserveLoad records a worker's load report.
func (r *Router) ObserveLoad(worker string, rep LoadReport) { r.load.observe(worker, rep, r.now()) }

// Load returns the load Pick would use for worker now.
func (r *Router) Load(worker string) Load {
	ws := []Worker{{ID: worker}}
	r.load.fill(ws, r.now())
	return ws[0].Load
}

// Forget drops everything the router knows about worker (load, in-flight
// requests, approximate index records): call it when the worker leaves.
func (r *Router) Forget(worker string) {
	r.load.forget(worker)
	r.approx.forget(worker)
}

// ApproxLen returns the number of block hashes in the approximate index.
func (r *Router) ApproxLen() int { return r.approx.len() }
