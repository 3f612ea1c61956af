package simulate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bench"
	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/gate"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/router"
)

// Live cadences the simulation keeps, in wall-equivalent time.
const (
	// reportEvery is how often a live worker publishes its load
	// (node.Worker runs bus.RunLoadReporter at 250 ms).
	reportEvery = 250 * time.Millisecond
	// reportFresh is how long the frontend trusts a load report for the
	// gate (node.Frontend.load).
	reportFresh = 2 * time.Second
)

// Config is one simulated run. Start from DefaultConfig; Validate fills the
// rest and refuses impossible clusters before anything runs.
type Config struct {
	// Items are the requests, in arrival order (bench.TraceItems); their At
	// is in reported (wall-equivalent) time.
	Items []bench.Item
	// Echoed into the report's settings.
	TracePath   string
	TraceFormat string
	TimeScale   float64
	Skip        int
	MaxRequests int

	Workers        int        // decode workers, or aggregated ones when PrefillWorkers is 0
	PrefillWorkers int        // prefill-role workers
	Engine         sim.Config // every worker's engine; ID, Role and Publisher are set per worker
	Router         string     // router policy
	TierBlind      bool       // kv counts lower-tier hits as misses (router.Config.TierBlind)
	Alpha          float64    // kv cost weight of prefill blocks; 0 means 1 (router.Config.Alpha)
	Disagg         gate.Mode
	LinkRate       linkemu.Rate  // prefill → decode line rate; TCP goodput of it is what moves
	LinkRTT        time.Duration // per transfer, wall-equivalent
	// Speedup is engine seconds per reported second, as `up --speedup`:
	// a simulation of a live cluster run at speedup S compares directly
	// with `bench` against it. 1 for planning.
	Speedup    float64
	TTFTSLO    time.Duration
	ITLSLO     time.Duration
	Seed       int64
	GPUHourUSD float64
	// Threads is how many goroutines step an aggregated cluster's workers
	// (window.go); the report is the same for any value. 0 means
	// GOMAXPROCS; 1, and any disaggregated cluster, run serially. The
	// default is 1: on a quiet 2-core box the serial run of 1,000 workers
	// and 39,930 requests took 17.1 s wall and 17.3 CPU-s, two threads 27.0 s
	// and 33.5 (the window hand-offs and the cache lines the threads share
	// cost more than the steps they split).
	Threads int
	// Progress, if set, is called now and then with requests finished,
	// the total and the virtual time reached.
	Progress func(done, total int, virtual time.Duration)
}

// DefaultConfig returns the defaults the CLI starts from.
func DefaultConfig() Config {
	return Config{
		TraceFormat: bench.FormatMooncake, TimeScale: 1, Workers: 4, Router: router.PolicyKV,
		Disagg: gate.ModeAuto, LinkRTT: 200 * time.Microsecond, Speedup: 1,
		TTFTSLO: 2 * time.Second, ITLSLO: 100 * time.Millisecond, Seed: 1, GPUHourUSD: 2, Threads: 1,
		Engine: sim.Config{Model: "qwen3-0.6b", GPU: "rtx-4060", BlockSize: 16, GPUMemoryUtilization: 0.9,
			MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, Speedup: 1},
	}
}

// Validate checks c and fills derived values; its errors name the flag to
// fix. It builds one engine to prove the model fits the GPU.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("simulate: "+format, a...)) }
	if c.Workers < 1 {
		bad("--workers %d: a cluster needs at least one worker", c.Workers)
	}
	if c.PrefillWorkers < 0 {
		bad("--prefill-workers %d is negative", c.PrefillWorkers)
	}
	if c.Workers+c.PrefillWorkers > kvindex.MaxWorkers {
		bad("%d workers: the prefix index holds at most %d", c.Workers+c.PrefillWorkers, kvindex.MaxWorkers)
	}
	if !(c.Speedup > 0) || math.IsInf(c.Speedup, 0) {
		bad("--speedup %g: want > 0", c.Speedup)
	}
	if c.TTFTSLO <= 0 || c.ITLSLO <= 0 {
		bad("--ttft-slo and --itl-slo must be > 0")
	}
	if c.GPUHourUSD < 0 || math.IsNaN(c.GPUHourUSD) {
		bad("--gpu-hour-usd %g: want >= 0", c.GPUHourUSD)
	}
	if c.LinkRTT < 0 {
		bad("--link-rtt %v is negative", c.LinkRTT)
	}
	if c.Threads < 0 {
		bad("--threads %d is negative (0 means one per CPU, 1 runs serially)", c.Threads)
	}
	if c.Threads == 0 {
		c.Threads = runtime.GOMAXPROCS(0)
	}
	var err error
	if c.Disagg, err = gate.ParseMode(string(c.Disagg)); err != nil {
		bad("--disagg: %v", err)
	}
	if _, err := router.New(router.Config{Policy: c.Router}); err != nil {
		bad("--router: %v", err)
	}
	if c.PrefillWorkers > 0 && !(c.LinkRate > 0) {
		bad("--prefill-workers %d needs --link-rate (e.g. 1gbit, 25gbit): the KV cache crosses it", c.PrefillWorkers)
	}
	if len(c.Items) == 0 {
		bad("the trace has no requests")
	}
	e := c.Engine
	e.ID, e.Role = "check", bus.RoleAggregated
	if err := e.Check(); err != nil {
		bad("%s on %s: %v", c.Engine.Model, c.Engine.GPU, err)
	}
	return errors.Join(errs...)
}

// event kinds.
const (
	evStep   uint8 = iota // a worker's step (or jump) ends
	evLink                // a link's next flow completes (if gen still matches)
	evReport              // a worker's load reporter ticks
)

type event struct {
	at   time.Duration
	seq  uint64
	kind uint8
	idx  int32 // worker or link
	gen  uint64
}

// eventHeap is a binary min-heap of events by (at, seq). Typed rather than
// container/heap: boxing each event in an interface allocated on every push
// (5% of a 1,000-worker run's CPU).
type eventHeap []event

func (e *event) before(f *event) bool {
	if e.at != f.at {
		return e.at < f.at
	}
	return e.seq < f.seq
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].before(&q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && q[c+1].before(&q[c]) {
			c++
		}
		if !q[c].before(&q[i]) {
			break
		}
		q[i], q[c] = q[c], q[i]
		i = c
	}
	*h = q
	return top
}

type worker struct {
	idx      int
	id       string
	role     string
	core     *sim.Core
	events   []kvevents.Event // published, not yet applied to the index
	stepping bool
	stepEnd  time.Duration
	dels     []sim.Delivery
	// spare is the other delivery buffer: stepDone delivers from one while
	// a kick nested in a delivery refills the other.
	spare []sim.Delivery
	// The load reporter ticks every reportEvery from phase, as a live
	// worker's ticker does from when it started. nextReport is its next
	// tick while ticking is set (a tick event is queued); an idle worker
	// whose last report was empty stops ticking, since another empty
	// report would change nothing.
	phase      time.Duration
	nextReport time.Duration
	ticking    bool
	report     gate.WorkerLoad
	reportAt   time.Duration
	reported   bool
	link       *link         // prefill workers: their egress
	busy       time.Duration // virtual time spent in steps
	// pushes counts the events queued for the worker; stepSeq and
	// reportSeq are the counts at which its pending step and report were
	// queued. They order a step and a report due at the same time as the
	// queue's global seq does, without the queue (window.go).
	pushes, stepSeq, reportSeq uint64
	effects                    // what its handlers changed outside it, while logging
}

// request is one trace request in flight.
type request struct {
	idx      int
	id       string
	arrival  time.Duration
	blocks   int // full prompt blocks (len of its hash chain)
	overlapD int
	decode   *worker
	prefill  *worker // set while the remote prefill runs or transfers
	remote   bool    // its prompt's KV comes from a remote prefill
	// queuedAt is when the decode leg of a remote prefill reached the
	// decode worker: P's prefill done, its KV still to cross. The decode
	// worker queues it from then (sim.Request.QueuedAt).
	queuedAt time.Duration
	rec      *bench.Record
}

// flow is one KV transfer on a link.
type flow struct {
	req       *request
	remaining float64 // bytes
	bytes     int64
	start     time.Duration
	parent    uint64
	hashes    []uint64
	pinned    *sim.PinnedSet
}

// link is a prefill worker's egress: flows share its rate equally
// (processor sharing), as TCP flows through one shaped link do.
type link struct {
	idx   int
	from  *worker
	rate  float64 // bytes per virtual second
	flows []*flow
	last  time.Duration
	gen   uint64
	next  time.Duration // when the next flow completes; valid while flows exist
}

type simulator struct {
	cfg     Config
	S       float64 // speedup
	epoch   time.Time
	now     time.Duration // virtual
	seq     uint64
	events  eventHeap
	workers []*worker
	byID    map[string]*worker
	decode  []router.Worker
	prefill []router.Worker
	links   []*link
	index   *kvindex.Index
	router  *router.Router
	gate    *gate.Gate
	pb      *bench.PromptBuilder
	bs      int

	reqs       []*request
	recs       []bench.Record
	next       int // next item to arrive
	finished   int
	lastDone   time.Duration
	buf        []uint32 // a prompt: item ready-1's, when ready > 0
	hbuf       []uint64 // its block hashes, when ready > 0
	ready      int
	prompts    [2]promptBuf // materialise's, by item parity
	stack      []int        // due's
	shared     int          // windows that ran more than one worker ahead
	split      int          // windows whose index writes the crew shared
	windowed   bool         // a windowed run: forward leaves its kick to the next window
	kicked     []*worker    // workers an arrival was forwarded to, in a windowed run
	writes     []indexWrite // the window's replayed index writes
	stripeBufs []stripeBuf  // writeIndex's, by crew goroutine
	nEvents    int64
	gapStride  int // keep every gapStride-th inter-token gap for the ITL percentiles
}

// maxGapSamples bounds the inter-token gaps a run keeps for its ITL
// percentiles: 16 M float64s, 128 MB (and as much again while sorting).
const maxGapSamples = 16 << 20

// wall converts virtual time to the wall-equivalent clock the router and
// gate read.
func (s *simulator) wall(v time.Duration) time.Time {
	return s.epoch.Add(time.Duration(float64(v) / s.S))
}

func (s *simulator) toWall(v time.Duration) float64 { return v.Seconds() / s.S }

func (s *simulator) push(e event) {
	s.seq++
	e.seq = s.seq
	s.events.push(e)
}

// Run simulates cfg (validated) and returns the report. ctx cancels it
// between events.
func Run(ctx context.Context, cfg Config) (*bench.Report, error) {
	s, err := newSimulator(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	return s.report(), nil
}

func newSimulator(cfg Config) (*simulator, error) {
	s := &simulator{cfg: cfg, S: cfg.Speedup, epoch: time.Unix(1e9, 0), byID: map[string]*worker{},
		pb: bench.NewPromptBuilder(cfg.Seed)}
	// Size the index for every worker's cache full of distinct blocks, so
	// it never doubles mid-run (a doubling copies a shard; at 1,000 workers
	// they took 7% of the run).
	var blocks int
	{
		e := cfg.Engine
		e.ID, e.Role = "size", bus.RoleAggregated
		if c, err := sim.NewCore(e, false); err == nil {
			blocks = c.TotalBlocks() * (cfg.Workers + cfg.PrefillWorkers)
		}
	}
	const shards = 64
	s.index = kvindex.New(kvindex.Config{Shards: shards, InitialSlots: blocks / shards * 4 / 3})
	var err error
	// Every simulated worker's events are healthy, so the router never
	// consults its approximate index: recording it took 45% of a run's CPU
	// at the default 1 Mi hashes, and 16% at 1 Ki.
	s.router, err = router.New(router.Config{Index: s.index, Policy: cfg.Router, Seed: uint64(cfg.Seed), NoApprox: true, TierBlind: cfg.TierBlind, Alpha: cfg.Alpha,
		Now: func() time.Time { return s.wall(s.now) }})
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	s.gate, err = gate.New(gate.Config{Mode: cfg.Disagg, TTFTSLO: cfg.TTFTSLO, ITLSLO: cfg.ITLSLO,
		Clock: func() time.Time { return s.wall(s.now) }})
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	add := func(id, role string) (*worker, error) {
		// Live workers start their reporters as they come up: the phases
		// are scattered, here by the seed.
		every := time.Duration(float64(reportEvery) * cfg.Speedup)
		ph := time.Duration(kvindex.Mix(uint64(cfg.Seed)^uint64(len(s.workers))<<32) % uint64(every))
		w := &worker{idx: len(s.workers), id: id, role: role, phase: ph}
		ec := cfg.Engine
		ec.ID, ec.Role = id, role
		ec.Publisher = sim.PublisherFunc(func(ev []kvevents.Event) { w.events = append(w.events, ev...) })
		c, err := sim.NewCore(ec, true)
		if err != nil {
			return nil, fmt.Errorf("simulate: worker %s: %w", id, err)
		}
		w.core = c
		s.workers = append(s.workers, w)
		s.byID[id] = w
		return w, nil
	}
	// Workers are named as `up` names them: the router breaks full ties by
	// a hash of the worker's ID, so the same names break them alike.
	decodeRole, decodeName := bus.RoleAggregated, "worker"
	if cfg.PrefillWorkers > 0 {
		decodeRole, decodeName = bus.RoleDecode, "decode"
	}
	for i := range cfg.Workers {
		w, err := add(fmt.Sprintf("%s-%d", decodeName, i+1), decodeRole)
		if err != nil {
			return nil, err
		}
		prof := w.core.Profile()
		s.decode = append(s.decode, router.Worker{ID: w.id, EventsHealthy: true, Profile: &prof})
	}
	rate := cfg.LinkRate.TCPGoodput().BytesPerSecond()
	for i := range cfg.PrefillWorkers {
		w, err := add(fmt.Sprintf("prefill-%d", i+1), bus.RolePrefill)
		if err != nil {
			return nil, err
		}
		prof := w.core.Profile()
		s.prefill = append(s.prefill, router.Worker{ID: w.id, EventsHealthy: true, Profile: &prof})
		w.link = &link{idx: len(s.links), from: w, rate: rate / s.S}
		s.links = append(s.links, w.link)
		// Live, the frontend probes each new pair when it registers,
		// before traffic: the simulation starts with every link measured.
		for _, d := range s.decode {
			s.gate.Links().ObserveProbe(w.id, d.ID, rate, cfg.LinkRTT)
		}
	}
	s.bs = s.workers[0].core.BlockSize()
	var outputs int64
	for i := range cfg.Items {
		outputs += int64(cfg.Items[i].MaxTokens)
	}
	s.gapStride = int(max(1, (outputs+maxGapSamples-1)/maxGapSamples))
	s.reqs = make([]*request, len(cfg.Items))
	s.recs = make([]bench.Record, len(cfg.Items))
	return s, nil
}

// arrivalAt is item i's arrival in virtual time.
func (s *simulator) arrivalAt(i int) time.Duration {
	return time.Duration(float64(s.cfg.Items[i].At) * s.S)
}

func (s *simulator) run(ctx context.Context) error {
	if t := s.cfg.Threads; t > 1 && s.cfg.PrefillWorkers == 0 {
		return s.runWindowed(ctx, t)
	}
	total := len(s.cfg.Items)
	progressEvery := max(1, total/100)
	for {
		if s.nEvents&1023 == 0 && ctx.Err() != nil {
			return fmt.Errorf("simulate: stopped at virtual %v after %d of %d requests: %w", s.now, s.finished, total, context.Cause(ctx))
		}
		haveArrival := s.next < total
		if len(s.events) == 0 && !haveArrival {
			break
		}
		s.nEvents++
		if haveArrival && (len(s.events) == 0 || s.arrivalAt(s.next) < s.events[0].at) {
			s.now = s.arrivalAt(s.next)
			s.arrive(s.next)
			s.next++
			continue
		}
		e := s.events.pop()
		s.now = e.at
		before := s.finished
		switch e.kind {
		case evStep:
			s.stepDone(s.workers[e.idx], s.now)
		case evLink:
			s.linkDone(s.links[e.idx], e.gen)
		case evReport:
			s.reportTick(s.workers[e.idx], s.now)
		}
		if s.cfg.Progress != nil && s.finished/progressEvery != before/progressEvery {
			s.cfg.Progress(s.finished, total, s.now)
		}
	}
	return s.conserve()
}

// conserve fails the requests left unfinished once the events run out:
// every request finishes or fails, and anything left is a simulator fault,
// reported rather than hidden.
func (s *simulator) conserve() error {
	for i, r := range s.reqs {
		if r != nil {
			s.fail(r, 0, "not_finished", fmt.Sprintf("request %d never finished (simulation stalled)", i))
		}
	}
	return nil
}

// horizon is how far worker w may run without stopping while item next is
// the next to arrive: that arrival, the next link completion or prefill
// step end (either can hand it a request), and its next load report (which
// must see the step then in progress, not the end of a longer jump).
func (s *simulator) horizon(w *worker, next int) time.Duration {
	h := time.Duration(math.MaxInt64)
	if w.ticking {
		h = w.nextReport
	}
	if next < len(s.cfg.Items) {
		h = min(h, s.arrivalAt(next))
	}
	for _, l := range s.links {
		if len(l.flows) > 0 {
			h = min(h, l.next)
		}
	}
	if w.role == bus.RoleDecode {
		for _, p := range s.workers[s.cfg.Workers:] {
			if p.stepping {
				h = min(h, p.stepEnd)
			}
		}
	}
	return h
}

// The handlers of a worker's own events (stepDone, reportTick and what
// they call: kick, deliver) take the virtual time now as an argument rather
// than reading s.now, and change nothing outside the worker, its core and
// its requests except through s.effect: a windowed run (window.go) runs
// them for many workers at once.

// kick starts w's next step (or jump) if it has work and none is running.
func (s *simulator) kick(w *worker, now time.Duration) { s.kickBefore(w, now, s.next) }

// kickBefore is kick while item next is the next to arrive.
func (s *simulator) kickBefore(w *worker, now time.Duration, next int) {
	if w.stepping {
		return
	}
	w.core.CatchUp(now)
	s.startTicking(w, now)
	dt, dels := w.core.Advance(s.horizon(w, next))
	if dt == 0 {
		return
	}
	// A live engine publishes a step's KV events when it computes the step,
	// then waits out its duration before delivering tokens: the index
	// learns of the blocks at the step's start.
	s.applyEvents(w, 0)
	w.dels = append(w.dels[:0], dels...)
	w.busy += dt
	w.stepping, w.stepEnd = true, w.core.Clock()
	s.schedule(w, evStep, w.stepEnd)
}

// applyEvents applies w's published events from from on to the index; a
// logging worker logs them (from is then 0: all it has not logged yet).
func (s *simulator) applyEvents(w *worker, from int) {
	if w.logging {
		if len(w.events) > w.logged {
			s.effect(w, effect{kind: fxApply, lo: w.logged, hi: len(w.events)})
			w.logged = len(w.events)
		}
		return
	}
	if len(w.events) > from {
		kvevents.Apply(s.index, w.id, w.events[from:])
		w.core.RecycleEvents(w.events[from:])
		clear(w.events[from:])
		w.events = w.events[:from]
	}
}

// schedule queues w's next step end or report tick.
func (s *simulator) schedule(w *worker, kind uint8, at time.Duration) {
	w.pushes++
	if kind == evStep {
		w.stepSeq = w.pushes
	} else {
		w.reportSeq = w.pushes
	}
	s.effect(w, effect{kind: fxPush, at: at, ev: kind})
}

func (s *simulator) stepDone(w *worker, now time.Duration) {
	w.stepping = false
	s.applyEvents(w, 0)
	// A delivery can start w's next step before the others are delivered:
	// a remote prefill whose KV the decode worker already holds finishes
	// its transfer at once, and that kicks w (its queue may have waited for
	// the pins). The step fills w.dels, so deliver from the other buffer:
	// ranging over w.dels delivered the new step's finishes early and again
	// at its end (a prefill's Done twice, then a panic on its recycled
	// buffer).
	dels := w.dels
	w.dels, w.spare = w.spare[:0], nil
	for _, d := range dels {
		s.deliver(w, d, now)
	}
	clear(dels)
	w.spare = dels[:0]
	s.kick(w, now)
}

// startTicking queues w's next reporter tick if it is not ticking: the
// first tick of its phase after now.
func (s *simulator) startTicking(w *worker, now time.Duration) {
	if w.ticking {
		return
	}
	every := time.Duration(float64(reportEvery) * s.S)
	w.nextReport = w.phase
	if now >= w.phase {
		w.nextReport += ((now-w.phase)/every + 1) * every
	}
	w.ticking = true
	s.schedule(w, evReport, w.nextReport)
}

// reportTick publishes w's load as its live reporter does on each tick:
// the queues as they stand, which mid-step is the state the step will
// leave (a live engine applies a step when it starts it, then waits out
// its duration). A worker running a jump is at most one step ahead, as
// live: its horizon stopped the jump at the step that spans the tick.
func (s *simulator) reportTick(w *worker, now time.Duration) {
	s.reportLoad(w, now)
	if w.core.Idle() && !w.stepping && w.report == (gate.WorkerLoad{}) {
		w.ticking = false
		return
	}
	w.nextReport += time.Duration(float64(reportEvery) * s.S)
	s.schedule(w, evReport, w.nextReport)
}

func (s *simulator) reportLoad(w *worker, now time.Duration) {
	l := w.core.Load()
	w.report = gate.WorkerLoad{QueuedPrefillTokens: l.QueuedPrefillTokens, Waiting: l.Waiting, Running: l.Running, ActiveDecodeBlocks: l.ActiveDecodeBlocks}
	w.reportAt, w.reported = now, true
	s.effect(w, effect{kind: fxLoad, load: router.LoadReport{
		QueuedPrefillBlocks: (l.QueuedPrefillTokens + s.bs - 1) / s.bs,
		ActiveDecodeBlocks:  l.ActiveDecodeBlocks,
		Running:             l.Running, Waiting: l.Waiting,
		TakenAt: s.wall(now),
	}})
}

func (s *simulator) view(w *worker) gate.WorkerView {
	v := gate.WorkerView{ID: w.id, Profile: w.core.Profile(), BlockSize: s.bs, KVBytesPerToken: w.core.KVBytesPerToken()}
	if w.reported && s.now-w.reportAt < time.Duration(float64(reportFresh)*s.S) {
		l := w.report
		v.Load = &l
	}
	return v
}

// prompt materialises item i's prompt into the shared buffer, without its
// hashes.
func (s *simulator) prompt(i int) []uint32 {
	s.buf = s.cfg.Items[i].AppendPrompt(s.pb, s.buf[:0])
	s.ready = 0
	return s.buf
}

func (s *simulator) arrive(i int) {
	it := &s.cfg.Items[i]
	s.materialise(i)
	prompt := s.buf
	r := &request{idx: i, id: "r" + strconv.Itoa(i), arrival: s.now, blocks: len(s.hbuf), rec: &s.recs[i]}
	s.reqs[i] = r
	*r.rec = bench.Record{Index: it.Index, Group: it.Group, StartS: s.toWall(s.now), InputTokens: len(prompt),
		SharedTokens: it.SharedTokens, MaxTokens: it.MaxTokens}
	// Each Pick books r on its worker, as live: released below if r does
	// not go there.
	rq := &router.Request{ID: r.id, Hashes: s.hbuf, PromptTokens: len(prompt), OutputTokens: it.MaxTokens, BlockSize: s.bs}
	dec, err := s.router.Pick(rq, s.decode)
	if err != nil {
		s.fail(r, 503, "router", err.Error())
		return
	}
	d := s.byID[dec.Worker]
	r.decode, r.overlapD = d, dec.OverlapBlocks
	ov := dec.OverlapBlocks * s.bs
	r.rec.Worker, r.rec.OverlapTokens, r.rec.Policy = d.id, &ov, dec.Policy
	if len(s.prefill) == 0 {
		s.forward(r, prompt, s.hbuf)
		return
	}
	rq.OutputTokens = 0 // it decodes on d
	pdec, err := s.router.Pick(rq, s.prefill)
	if err != nil {
		r.rec.Prefill, r.rec.DisaggReason = "local", "no prefill worker: "+err.Error()
		s.forward(r, prompt, s.hbuf)
		return
	}
	p := s.byID[pdec.Worker]
	gd := s.gate.Decide(gate.InputFor(s.cfg.Disagg, len(prompt), dec.OverlapBlocks*s.bs, pdec.OverlapBlocks*s.bs, s.view(d), s.view(p)))
	pred := float64(gd.Predicted()) / float64(time.Millisecond)
	r.rec.PredictedTTFTMs, r.rec.DisaggReason = &pred, string(gd.Reason)
	if gd.Choice != gate.ChoiceRemote {
		s.router.Release(p.id, r.id)
		r.rec.Prefill = "local"
		s.forward(r, prompt, s.hbuf)
		return
	}
	r.rec.Prefill = "remote"
	// d stays counted while the KV crosses, with nothing to prefill.
	promptBlocks := (len(prompt) + s.bs - 1) / s.bs
	s.router.Started(d.id, r.id, 0, promptBlocks)
	s.router.Started(p.id, r.id, max(0, r.blocks-pdec.OverlapBlocks), promptBlocks)
	if _, err := p.core.Add(sim.Request{ID: r.id, Tokens: prompt, Hashes: s.hbuf, Pin: true, Tag: i}, s.now); err != nil {
		// Live: the remote prefill fails and the frontend prefills locally.
		s.router.Finished(p.id, r.id)
		r.rec.Prefill, r.rec.DisaggReason = "local", "remote prefill failed, fell back to local: "+r.rec.DisaggReason
		s.forward(r, prompt, s.hbuf)
		return
	}
	r.prefill, r.remote = p, true
	s.kick(p, s.now)
}

// forward sends r to its decode worker, as the frontend does once routing
// (and any remote prefill) is done. hashes are the prompt's block hashes,
// or nil for the engine to compute.
func (s *simulator) forward(r *request, prompt []uint32, hashes []uint64) {
	d := r.decode
	pb := max(0, r.blocks-r.overlapD)
	if r.remote {
		pb = 0 // the KV came by transfer
	}
	s.router.Started(d.id, r.id, pb, (len(prompt)+s.bs-1)/s.bs)
	if s.windowed {
		// The rest is d's own business: the next window runs it ahead
		// (window.go).
		d.added = pending{r, prompt, hashes, s.now, s.next}
		s.kicked = append(s.kicked, d)
		return
	}
	s.add(d, pending{r, prompt, hashes, s.now, s.next})
}

// pending is a request forwarded to a worker: its prompt and block hashes,
// when, and which item was then the next to arrive.
type pending struct {
	r      *request
	prompt []uint32
	hashes []uint64
	at     time.Duration
	next   int
}

// add queues p's request on d and starts d's step, as forward does.
func (s *simulator) add(d *worker, p pending) {
	r := p.r
	it := &s.cfg.Items[r.idx]
	if _, err := d.core.Add(sim.Request{ID: r.id, Tokens: p.prompt, Hashes: p.hashes, MaxTokens: it.MaxTokens, Tag: r.idx, QueuedAt: r.queuedAt}, p.at); err != nil {
		s.effect(d, effect{kind: fxFinished, req: r.id})
		s.failed(r, 400, "http_400", err.Error())
		s.effect(d, effect{kind: fxDone})
		return
	}
	s.kickBefore(d, p.at, p.next)
}

func (s *simulator) fail(r *request, status int, kind, msg string) {
	s.failed(r, status, kind, msg)
	s.finished++
	s.lastDone = max(s.lastDone, s.now)
}

// failed records r's failure; the caller counts it.
func (s *simulator) failed(r *request, status int, kind, msg string) {
	r.rec.Status, r.rec.Outcome, r.rec.ErrorKind, r.rec.ErrorMsg = status, bench.OutcomeError, kind, msg
	if status == 503 || status == 429 {
		r.rec.Outcome = bench.OutcomeRejected
	}
	s.reqs[r.idx] = nil
}

// deliver hands w's delivery d to its request. Prefill workers run in
// serial runs only: their path may touch other workers and links.
func (s *simulator) deliver(w *worker, d sim.Delivery, now time.Duration) {
	r := s.reqs[d.H.Tag()]
	if r == nil {
		return
	}
	if w == r.prefill {
		if d.Done {
			s.router.Finished(w.id, r.id)
			pinned := d.H.Result().Pinned
			w.core.Recycle(d.H)
			s.startTransfer(r, pinned)
		}
		return
	}
	if d.First {
		r.rec.TTFTS = s.toWall(now - r.arrival)
		s.effect(w, effect{kind: fxFirstToken, req: r.id})
	}
	if d.Done {
		s.effect(w, effect{kind: fxFinished, req: r.id})
		res := d.H.Result()
		rec := r.rec
		rec.Status, rec.Outcome = 200, bench.OutcomeOK
		rec.E2ES = s.toWall(now - r.arrival)
		// The engine counts the blocks pulled from a remote prefill as
		// cached; they are reported as transferred instead, as bench does.
		rec.PromptTokens, rec.CompletionTokens = res.PromptTokens, len(res.Output)
		rec.CachedTokens = res.CachedTokens
		if rec.TransferredTokens > 0 {
			rec.CachedTokens = bench.LocalCachedTokens(res.CachedTokens, res.PromptTokens, rec.TransferredTokens, s.bs)
		}
		if s.cfg.Engine.KVOffloadGiB > 0 {
			kvb := int64(w.core.KVBytesPerToken())
			rec.KVTiers = &openai.KVTiers{GPUTokens: max(0, res.TierTokens[0]-(res.CachedTokens-rec.CachedTokens)), CPUTokens: res.TierTokens[1], DiskTokens: res.TierTokens[2],
				CPULoadedBytes: int64(res.TierTokens[1]) * kvb, DiskLoadedBytes: int64(res.TierTokens[2]) * kvb,
				LoadMs: s.toWall(res.Load) * 1000}
		}
		rec.Chunks = len(res.Output)
		// Every gap counts towards the request's mean and max ITL (goodput);
		// the run-wide ITL percentiles sample every gapStride-th gap so that
		// a million-request run does not hold hundreds of millions of them.
		var sum, mx float64
		gaps := make([]float64, 0, len(res.Gaps)/s.gapStride+1)
		for i, g := range res.Gaps {
			v := float64(g) / s.S
			sum += v
			mx = max(mx, v)
			if (i+r.idx)%s.gapStride == 0 {
				gaps = append(gaps, v)
			}
		}
		rec.SetITLs(gaps)
		rec.ITLMaxS, rec.ITLMeanS = mx, 0
		if len(res.Gaps) > 0 {
			rec.ITLMeanS = sum / float64(len(res.Gaps))
		}
		w.core.Recycle(d.H) // res is read: its token buffer serves a later request
		s.reqs[r.idx] = nil
		s.effect(w, effect{kind: fxDone})
	}
}

// startTransfer moves the prefill's pinned blocks the decode worker does
// not hold over the prefill worker's link, as the decode worker's pull does
// live.
func (s *simulator) startTransfer(r *request, pinned *sim.PinnedSet) {
	d, p := r.decode, r.prefill
	r.queuedAt = s.now
	f := &flow{req: r, start: s.now, pinned: pinned}
	if pinned != nil {
		have := d.core.CachedPrefix(pinned.Hashes)
		f.parent = pinned.Parent
		if have > 0 {
			f.parent = pinned.Hashes[have-1]
		}
		f.hashes = pinned.Hashes[have:]
		f.bytes = int64(len(f.hashes)) * int64(d.core.BlockBytes())
	}
	if f.bytes == 0 {
		s.finishTransfer(f)
		return
	}
	l := p.link
	l.advance(s.now)
	// The RTT is paid before the bytes flow: it joins the flow's size at
	// the link's current share, a simplification that keeps one event per
	// completion.
	f.remaining = float64(f.bytes) + s.cfg.LinkRTT.Seconds()*s.S*l.rate
	l.flows = append(l.flows, f)
	s.scheduleLink(l)
}

func (l *link) advance(now time.Duration) {
	if n := len(l.flows); n > 0 && now > l.last {
		per := l.rate * (now - l.last).Seconds() / float64(n)
		for _, f := range l.flows {
			f.remaining -= per
		}
	}
	l.last = now
}

func (s *simulator) scheduleLink(l *link) {
	l.gen++
	if len(l.flows) == 0 {
		return
	}
	least := l.flows[0].remaining
	for _, f := range l.flows[1:] {
		least = min(least, f.remaining)
	}
	secs := max(0, least) * float64(len(l.flows)) / l.rate
	l.next = s.now + time.Duration(math.Ceil(secs*1e9))
	s.push(event{at: l.next, kind: evLink, idx: int32(l.idx), gen: l.gen})
}

func (s *simulator) linkDone(l *link, gen uint64) {
	if gen != l.gen {
		return // superseded by a later flow change
	}
	l.advance(s.now)
	var done []*flow
	keep := l.flows[:0]
	for _, f := range l.flows {
		if f.remaining <= 1 { // a byte of float slack
			done = append(done, f)
		} else {
			keep = append(keep, f)
		}
	}
	clear(l.flows[len(keep):])
	l.flows = keep
	s.scheduleLink(l)
	for _, f := range done {
		s.finishTransfer(f)
	}
}

// finishTransfer inserts the received blocks on the decode worker, releases
// the prefill worker's pins, teaches the gate the link and forwards the
// request, as the decode worker and frontend do live.
func (s *simulator) finishTransfer(f *flow) {
	r := f.req
	d, p := r.decode, r.prefill
	if len(f.hashes) > 0 {
		n := len(d.events)
		_ = d.core.InsertBlocks(f.parent, f.hashes) // a full cache recomputes, as live
		r.rec.TransferredTokens = len(f.hashes) * s.bs
		s.applyEvents(d, n)
		s.gate.Links().Observe(p.id, d.id, f.bytes, time.Duration(float64(s.now-f.start)/s.S))
	}
	if f.pinned != nil {
		f.pinned.Release()
	}
	r.prefill = nil
	s.kick(p, s.now) // its queue may have waited for the pinned blocks
	// nil: the engine hashes the prompt (s.hbuf is another prompt's by now).
	s.forward(r, s.prompt(r.idx), nil)
}

func (s *simulator) report() *bench.Report {
	cfg := s.cfg
	slo := bench.SLO{TTFT: cfg.TTFTSLO, ITL: cfg.ITLSLO}
	var first time.Duration
	if len(cfg.Items) > 0 {
		first = s.arrivalAt(0)
	}
	dur := s.toWall(s.lastDone - first)
	run := bench.PolicyRun{Policy: cfg.Router, Records: s.recs}
	if cfg.PrefillWorkers > 0 {
		run.DisaggMode = string(cfg.Disagg)
	}
	run.Aggregate = bench.Summarize(s.recs, dur, slo)
	ec := s.workers[0].core.Config()
	rep := &bench.Report{
		Schema: bench.SchemaVersion, Scenario: bench.ScenarioTrace, URL: "simulate", Model: ec.Model,
		BlockSize: s.bs, Runs: []bench.PolicyRun{run},
		Deployment: bench.Health{Status: "simulated", BlockSize: s.bs},
		Settings: bench.Settings{Trace: cfg.TracePath, TraceFormat: cfg.TraceFormat, TimeScale: cfg.TimeScale,
			Skip: cfg.Skip, MaxRequests: cfg.MaxRequests, Seed: cfg.Seed, TTFTSLOS: cfg.TTFTSLO.Seconds(), ITLSLOS: cfg.ITLSLO.Seconds()},
	}
	for _, w := range s.workers {
		hw := bench.HealthWorker{ID: w.id, Role: w.role}
		hw.Events.State = "healthy"
		rep.Deployment.Workers = append(rep.Deployment.Workers, hw)
	}
	a := &run.Aggregate
	gpus := (cfg.Workers + cfg.PrefillWorkers) * ec.TP
	sm := &bench.Simulation{Model: ec.Model, GPU: ec.GPU, TP: ec.TP, Workers: cfg.Workers, PrefillWorkers: cfg.PrefillWorkers,
		GPUs: gpus, Router: cfg.Router, Disagg: string(cfg.Disagg), Speedup: s.S, KVBlocks: s.workers[0].core.TotalBlocks(),
		VirtualS: dur, GPUHourUSD: cfg.GPUHourUSD, Events: s.nEvents}
	if cfg.PrefillWorkers > 0 {
		sm.LinkRate = cfg.LinkRate.String()
		sm.LinkRTTS = cfg.LinkRTT.Seconds()
	}
	var busy time.Duration
	for _, w := range s.workers {
		sm.Steps += int64(w.core.Steps())
		sm.ITLSampleStride = s.gapStride
		busy += w.busy
	}
	if span := s.lastDone - first; span > 0 {
		sm.Utilization = busy.Seconds() / span.Seconds() / float64(len(s.workers))
	}
	sm.CostUSD = float64(gpus) * dur / 3600 * cfg.GPUHourUSD
	out := a.OutputTokensPerS * dur
	if tok := a.InputTokensPerS*dur + out; tok > 0 {
		sm.USDPerMillionTokens = sm.CostUSD / (tok / 1e6)
	}
	if out > 0 {
		sm.USDPerMillionOutput = sm.CostUSD / (out / 1e6)
	}
	if gpus > 0 {
		sm.GoodputPerGPU = a.GoodputRPS / float64(gpus)
	}
	rep.Runs[0] = run
	rep.Simulation = sm
	return rep
}
