package router

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// Policy names.
const (
	PolicyKV          = "kv"
	PolicyRoundRobin  = "round-robin"
	PolicyRandom      = "random"
	PolicyLeastLoaded = "least-loaded"
)

// Reasons a Decision gives.
const (
	ReasonOverlap     = "prefix-overlap" // kv: the winner holds part of the prompt
	ReasonNoOverlap   = "no-overlap"     // kv: nobody holds the prompt's first block; cost is load alone
	ReasonPinned      = "pinned"         // the request named its worker
	ReasonRoundRobin  = "rotation"       // round-robin
	ReasonRandom      = "random"         // random
	ReasonLeastLoaded = "least-loaded"   // least-loaded
)

// ErrNoWorkers is returned when a request has no candidate workers.
var ErrNoWorkers = errors.New("router: no candidate workers")

// ErrPinNotCandidate is returned when Request.Pin names a worker that is not
// among the candidates.
var ErrPinNotCandidate = errors.New("router: pinned worker is not a candidate")

// Load is a worker's load in KV blocks.
type Load struct {
	QueuedPrefillBlocks int // prompt blocks waiting for or in prefill
	ActiveDecodeBlocks  int // KV blocks of requests that are decoding
	InFlight            int // requests
	// CachedBlocks is how many blocks the prefix index says the worker
	// caches: the last tie-breaker of kv before the tie rank, so that a new
	// prefix goes where the cache is emptiest.
	CachedBlocks int
}

// Blocks is the load the policies compare: queued prefill plus active decode.
func (l Load) Blocks() int { return l.QueuedPrefillBlocks + l.ActiveDecodeBlocks }

// Worker is one candidate for a request.
type Worker struct {
	ID            string
	EventsHealthy bool // false: the index may be stale for it; the approximate index is consulted
	Load          Load // filled in by Router.Pick from its tracking
	// Profile is the worker's registered timing profile, which prices its
	// lower-tier hits (see the package doc). Nil: they are worth nothing.
	Profile *bus.Profile
	// Adapter is where the request's LoRA adapter stands on the worker;
	// the kv cost adds the time to make it usable there.
	Adapter AdapterState
}

// AdapterState is a candidate's standing for a request's LoRA adapter.
type AdapterState uint8

const (
	// AdapterReady: the request names no adapter, or the worker holds it.
	AdapterReady AdapterState = iota
	// AdapterLoad: the worker must load the adapter into a free slot.
	AdapterLoad
	// AdapterSwap: every slot holds another adapter; one must be swapped
	// out, once the requests using it are done.
	AdapterSwap
)

// Request is what a policy decides on.
type Request struct {
	// ID identifies the request among those in flight: Pick books it on
	// the worker it chooses under this ID (see Router.Pick). "" books
	// nothing.
	ID           string
	Hashes       []uint64 // the prompt's block hashes, chained from its cache_salt root
	PromptTokens int
	// OutputTokens is the request's max_tokens, which prices its decode
	// time; 0 when unknown (one decode step is priced).
	OutputTokens int
	BlockSize    int
	Pin          string // optional: the worker to use, for debug probes
	// Policy, when set, overrides the router's policy for this request
	// (a model's own, from the fleet config); Alpha likewise overrides
	// the kv policy's weight when positive.
	Policy string
	Alpha  float64
}

// Decision is a policy's answer.
type Decision struct {
	Worker        string
	OverlapBlocks int // leading blocks of the prompt Worker holds, in any tier
	// Tiers splits OverlapBlocks by the tier each block is in on Worker.
	Tiers kvindex.TierCounts
	// Priced is the overlap the kv cost credited, in blocks: GPU blocks
	// count 1, lower-tier blocks the share of their recompute time that
	// loading them saves (0 when tier-blind or not worth loading).
	Priced float64
	Policy string
	Reason string
	// Cost is the winner's kv cost: seconds when every candidate has a
	// timing profile, else blocks (see the package doc). kv only.
	Cost   float64
	Approx bool // the overlap came from the approximate index
	// IndexBlocks is the leading blocks of the prompt the KV-event index
	// alone shows on Worker, whatever the approximate index said: what the
	// engine's own cache report is checked against. It equals
	// OverlapBlocks unless Approx.
	IndexBlocks int
	// deferred: Pick left the record of this decision to Record, with the
	// decision's time at.
	deferred bool
	at       time.Time
}

// Deferred reports whether Pick left recording d to the caller's Record.
func (d Decision) Deferred() bool { return d.deferred }

// Overlapper gives the prefix overlap of candidate i (an index into the
// workers passed to Pick) and whether it came from the approximate index.
type Overlapper interface {
	Overlap(i int) (blocks int, approx bool)
	// Priced is candidate i's overlap as the kv cost credits it, in
	// blocks (see Decision.Priced); Tiers its split by tier.
	Priced(i int) float64
	Tiers(i int) kvindex.TierCounts
	// Estimate is candidate i's predicted time to first token and decode
	// time, wall seconds; ok is false when some candidate has no timing
	// profile, and the kv policy then falls back to its block cost.
	Estimate(i int) (ttft, decode float64, ok bool)
}

// Policy chooses one of workers for req. workers is never empty when a
// Router calls it. Implementations must be safe for concurrent use.
type Policy interface {
	Name() string
	Pick(req *Request, workers []Worker, ov Overlapper) (Decision, error)
}

var (
	_ Policy = (*KV)(nil)
	_ Policy = (*RoundRobin)(nil)
	_ Policy = (*Random)(nil)
	_ Policy = (*LeastLoaded)(nil)
)

// maxRotations bounds the rotation counters a policy keeps. Candidate sets
// are few (the decode pool, the prefill pool, each minus a failed worker
// on retry), so the bound is only reached under worker churn, where
// starting the counters over costs nothing but evenness for a moment.
const maxRotations = 1024

// rotation hands out rotating offsets with one counter per candidate set.
// A frontend picks from several pools for one request (decode workers,
// then prefill workers); a single shared counter would advance twice per
// request and, with two decode workers, land every request on the same
// one. The zero value is ready to use; safe for concurrent use; a warm
// call does not allocate.
type rotation struct {
	// start is where every counter begins: frontend replicas that start
	// at different offsets do not send simultaneous cold prompts to the
	// same worker before they hear of each other's decisions.
	start uint64
	mu    sync.RWMutex              // guards m
	m     map[uint64]*atomic.Uint64 // candidate-set key → picks made from that set
}

// next returns how many picks were made from this candidate set before,
// and counts this one.
func (r *rotation) next(workers []Worker) uint64 {
	k := setKey(workers)
	r.mu.RLock()
	c := r.m[k]
	r.mu.RUnlock()
	if c == nil {
		r.mu.Lock()
		if c = r.m[k]; c == nil {
			if r.m == nil || len(r.m) >= maxRotations {
				r.m = make(map[uint64]*atomic.Uint64)
			}
			c = new(atomic.Uint64)
			c.Store(r.start)
			r.m[k] = c
		}
		r.mu.Unlock()
	}
	return c.Add(1) - 1
}

// setKey identifies a set of worker IDs regardless of their order: the sum
// of idHash of each ID.
func setKey(workers []Worker) uint64 {
	var k uint64
	for i := range workers {
		k += idHash(workers[i].ID)
	}
	return k
}

// idHash is a mixed FNV-1a hash of a worker ID.
func idHash(id string) uint64 {
	h := uint64(14695981039346656037)
	for j := 0; j < len(id); j++ {
		h ^= uint64(id[j])
		h *= 1099511628211
	}
	// FNV's low bits mix poorly: a plain sum of them would make distinct
	// sets collide easily, and a tie rank would favour some IDs.
	return kvindex.Mix(h)
}

// tieRank orders candidates that kv or least-loaded cannot tell apart
// (equal cost, load and cache): the lowest rank wins. It hashes the
// prompt's chain hash (its last full block's, which covers every token
// before it) with the worker's ID, so the winner depends on the request
// alone: not on how many picks came before, on which frontend replica
// picks, or on when it arrives. A live cluster and `switchyard simulate`
// therefore break the same tie the same way, and so do two replicas handed
// the same new prompt at once. Distinct prompts spread over the workers as
// evenly as random choice would.
func tieRank(chain uint64, w *Worker) uint64 { return kvindex.Mix(chain ^ idHash(w.ID)) }

// RoundRobin rotates over each candidate set: the n-th pick from a set
// (counted across all goroutines) takes candidate n mod len(workers).
// Picks from other sets (another pool) do not advance it.
type RoundRobin struct{ rot rotation }

// Name implements Policy.
func (*RoundRobin) Name() string { return PolicyRoundRobin }

// Pick implements Policy.
func (p *RoundRobin) Pick(req *Request, workers []Worker, ov Overlapper) (Decision, error) {
	if len(workers) == 0 {
		return Decision{}, ErrNoWorkers
	}
	i := int(p.rot.next(workers) % uint64(len(workers)))
	return decision(workers, i, ov, PolicyRoundRobin, ReasonRoundRobin), nil
}

// Random picks uniformly from a seeded generator, so a run is reproducible.
type Random struct {
	mu  sync.Mutex // guards rng
	rng *rand.Rand
}

// NewRandom returns a Random policy seeded with seed.
func NewRandom(seed uint64) *Random {
	return &Random{rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
}

// Name implements Policy.
func (*Random) Name() string { return PolicyRandom }

// Pick implements Policy.
func (p *Random) Pick(req *Request, workers []Worker, ov Overlapper) (Decision, error) {
	if len(workers) == 0 {
		return Decision{}, ErrNoWorkers
	}
	p.mu.Lock()
	i := p.rng.IntN(len(workers))
	p.mu.Unlock()
	return decision(workers, i, ov, PolicyRandom, ReasonRandom), nil
}

// LeastLoaded picks the candidate with the fewest queued prefill plus active
// decode blocks; ties go to the lowest tieRank, or rotate, per candidate
// set, when the prompt has no full block to rank by.
type LeastLoaded struct{ rot rotation }

// Name implements Policy.
func (*LeastLoaded) Name() string { return PolicyLeastLoaded }

// Pick implements Policy.
func (p *LeastLoaded) Pick(req *Request, workers []Worker, ov Overlapper) (Decision, error) {
	if len(workers) == 0 {
		return Decision{}, ErrNoWorkers
	}
	t := newTies(req, workers, &p.rot)
	best := t.start
	for k := 1; k < len(workers); k++ {
		i := (t.start + k) % len(workers)
		l, bl := workers[i].Load.Blocks(), workers[best].Load.Blocks()
		if l < bl || (l == bl && t.before(workers, i, best)) {
			best = i
		}
	}
	return decision(workers, best, ov, PolicyLeastLoaded, ReasonLeastLoaded), nil
}

// ties breaks the full ties of one Pick: by tieRank when the prompt has a
// full block, otherwise by scan order from a rotating start (the first
// candidate met wins). It ranks a candidate only when a tie needs it.
type ties struct {
	ranked   bool
	chain    uint64 // the prompt's last block hash, when ranked
	start    int    // where the scan starts
	best     int    // the candidate bestRank belongs to; -1: none ranked
	bestRank uint64
}

func newTies(req *Request, workers []Worker, rot *rotation) ties {
	if len(req.Hashes) > 0 {
		return ties{ranked: true, chain: req.Hashes[len(req.Hashes)-1], best: -1}
	}
	return ties{start: int((rot.next(workers) + 1) % uint64(len(workers))), best: -1}
}

// before reports whether candidate i wins a full tie against candidate
// best (met earlier in the scan).
func (t *ties) before(workers []Worker, i, best int) bool {
	if !t.ranked {
		return false
	}
	if t.best != best {
		t.best, t.bestRank = best, tieRank(t.chain, &workers[best])
	}
	r := tieRank(t.chain, &workers[i])
	if r < t.bestRank {
		t.best, t.bestRank = i, r
		return true
	}
	return false
}

// KV is the cache-aware policy; see the package comment for its cost.
type KV struct {
	// Alpha weighs prefill blocks (to compute or queued) against decode
	// blocks; 1 when zero.
	Alpha float64
	// AdapterLoad and AdapterSwap are the seconds a worker in
	// AdapterLoad or AdapterSwap adds to a request's time to first token.
	AdapterLoad, AdapterSwap float64
	rot                      rotation // tie rotation of prompts without a full block, per candidate set
}

// blocksPerAdapterSecond prices a second of adapter loading in the block
// cost, used when some candidate has no timing profile: a second is what
// an 8B model on an L4 takes to prefill about 4,000 tokens (250 blocks of
// 16), the order of what the time cost would weigh it at.
const blocksPerAdapterSecond = 250

// adapterPenalty is what worker w's adapter state adds to its time to
// first token, in seconds.
func (p *KV) adapterPenalty(w *Worker) float64 {
	switch w.Adapter {
	case AdapterLoad:
		return p.AdapterLoad
	case AdapterSwap:
		return p.AdapterSwap
	}
	return 0
}

// Name implements Policy.
func (*KV) Name() string { return PolicyKV }

// Cost returns the block cost of a worker for a prompt of b blocks,
// overlap of which (priced, so possibly fractional) the worker need not
// compute: the kv cost when some candidate has no timing profile.
func (p *KV) Cost(b int, overlap float64, l Load) float64 {
	return p.alpha()*(float64(b+l.QueuedPrefillBlocks)-overlap) + float64(l.ActiveDecodeBlocks)
}

// TimeCost returns the time cost of a worker whose predicted time to first
// token and decode time are ttft and decode, in seconds.
func (p *KV) TimeCost(ttft, decode float64) float64 { return p.alpha()*ttft + decode }

func (p *KV) alpha() float64 {
	if p.Alpha == 0 {
		return 1
	}
	return p.Alpha
}

// Pick implements Policy. Full ties (cold prompts on idle workers) go to
// the lowest tieRank, so they spread over the pool instead of piling onto
// the first, and fall the same way live and simulated. A prompt without a
// full block has no rank: its scan starts at an offset that rotates per
// candidate set (picks from another pool do not disturb it) and keeps the
// first of the tied.
func (p *KV) Pick(req *Request, workers []Worker, ov Overlapper) (Decision, error) {
	if len(workers) == 0 {
		return Decision{}, ErrNoWorkers
	}
	b := len(req.Hashes)
	n := len(workers)
	t := newTies(req, workers, &p.rot)
	alpha := p.alpha() // Cost and TimeCost, with the request's weight
	if req.Alpha > 0 {
		alpha = req.Alpha
	}
	best, bestCost, bestLoad, bestCached, bestOv, bestApprox := -1, 0.0, 0, 0, 0, false
	for k := 0; k < n; k++ {
		i := (t.start + k) % n
		o, approx := ov.Overlap(i)
		pen := p.adapterPenalty(&workers[i])
		ld := &workers[i].Load
		c := alpha*(float64(b+ld.QueuedPrefillBlocks)-ov.Priced(i)+pen*blocksPerAdapterSecond) + float64(ld.ActiveDecodeBlocks)
		if ttft, decode, ok := ov.Estimate(i); ok {
			c = alpha*(ttft+pen) + decode
		}
		l := workers[i].Load.Blocks()
		cached := workers[i].Load.CachedBlocks
		// Ties go to the least loaded, then to the emptiest cache (a cold
		// prefix placed by rotation alone can pile up on one worker and
		// thrash its cache: seen in the e2e routing table as 48 of 60
		// hits), then to the lowest tie rank.
		if best < 0 || c < bestCost || (c == bestCost && (l < bestLoad || (l == bestLoad &&
			(cached < bestCached || (cached == bestCached && t.before(workers, i, best)))))) {
			best, bestCost, bestLoad, bestCached, bestOv, bestApprox = i, c, l, cached, o, approx
		}
	}
	reason := ReasonNoOverlap
	if bestOv > 0 {
		reason = ReasonOverlap
	}
	return Decision{
		Worker:        workers[best].ID,
		OverlapBlocks: bestOv,
		Tiers:         ov.Tiers(best),
		Priced:        ov.Priced(best),
		Policy:        PolicyKV,
		Reason:        reason,
		Cost:          bestCost,
		Approx:        bestApprox,
	}, nil
}

func decision(workers []Worker, i int, ov Overlapper, policy, reason string) Decision {
	o, approx := ov.Overlap(i)
	return Decision{Worker: workers[i].ID, OverlapBlocks: o, Tiers: ov.Tiers(i), Priced: ov.Priced(i), Policy: policy, Reason: reason, Approx: approx}
}
