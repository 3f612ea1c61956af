package replica

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// Settings are the router and disaggregation settings changed through
// /admin. They are shared through a key-value entry (see settings.go):
// the last write the server sequenced wins.
type Settings struct {
	Policy  string `json:"policy,omitempty"`
	Disagg  string `json:"disagg,omitempty"`
	Version int64  `json:"version"` // unix nanoseconds of the change, for people; 0: nothing changed yet
	By      string `json:"by,omitempty"`
	// Rev is the entry's revision, the server's sequence of the write
	// that stored these settings; 0 until stored.
	Rev uint64 `json:"rev,omitempty"`
}

// Link is one measured prefill → decode link.
type Link struct {
	From        string  `json:"from"`
	To          string  `json:"to"`
	BytesPerSec float64 `json:"bps"`
	RTTMillis   float64 `json:"rtt_ms"`
	// Sync marks an estimate sent to a replica that just started, which
	// applies it only where it has none; a fresh probe result replaces.
	Sync bool `json:"sync,omitempty"`
}

// Applier receives the peers' share. Request IDs it is given are
// namespaced by replica, so they never collide with local ones. Its
// methods may be called concurrently and must not block.
type Applier interface {
	Started(worker, requestID string, prefillBlocks, promptBlocks int)
	FirstToken(worker, requestID string)
	Finished(worker, requestID string)
	// Dropped forgets a request of a replica that went away.
	Dropped(worker, requestID string)
	RecordApprox(worker string, hashes []uint64, at time.Time)
	Link(l Link)
	Settings(s Settings)
	// StoredResponse: a peer's client got response id, stored on worker.
	StoredResponse(id, worker string)
}

// Config configures a Sharer.
type Config struct {
	NC       *nats.Conn // required
	Subjects bus.Subjects
	// ID names this replica among its peers; "" picks a random one. It
	// must be unique among live replicas (a pod name is).
	ID    string
	Apply Applier // required
	// Links lists this replica's measured links, for a starting peer.
	Links func() []Link

	MinGap           time.Duration // 0: 2 ms between in-flight flushes
	FlushEvery       time.Duration // 0: 50 ms; approximate records and links wait at most this
	FullEvery        time.Duration // 0: 500 ms
	PeerTTL          time.Duration // 0: 1.5 s (three missed full sets)
	ApproxTTL        time.Duration // 0: 120 s, the router's default
	ApproxRefresh    time.Duration // 0: ApproxTTL / 4
	MaxPendingApprox int           // 0: 32768 hashes
	// OnPeersChanged is called when a peer appears or expires; it must not
	// block.
	OnPeersChanged func()

	Now        func() time.Time // nil: time.Now
	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: no metrics
}

// Sizes per message, kept well under NATS's default 1 MB max payload: a
// request entry is at most ~250 bytes (a 128-byte request ID, a 64-byte
// worker ID), an approximate hash 8 bytes (~11 in base64).
const (
	maxReqsPerMsg   = 2048
	maxHashesPerMsg = 16384
	maxShared       = 1 << 18 // hashes remembered as shared, for coalescing and for a starting peer
)

// reqKey names a request in flight on one worker: a disaggregated request
// is in flight on its prefill and its decode worker at once, under one ID.
type reqKey struct{ worker, id string }

type req struct {
	prefill, prompt int
	decoding        bool
}

type approxRec struct {
	worker string
	at     int64
}

// loggedApprox is one decision in aloneLog. It holds no pointer (the
// worker is an index into aloneWorkers), so the garbage collector never
// scans the log and writing to it needs no write barrier: with the
// worker's ID string in each record the log was 8 MB the collector walked
// on every cycle, and logging a long prompt's decision took 15-28 us.
type loggedApprox struct {
	hash   uint64
	at     int64
	worker uint32
}

// Sharer shares this replica's routing state and applies its peers'.
// Its recording methods are safe for concurrent use, cheap, and never
// block on the network; Run does the publishing. A nil *Sharer records
// nothing (sharing off).
type Sharer struct {
	cfg   Config
	log   *slog.Logger
	epoch int64
	m     *metrics
	kick  chan struct{}
	// settingsKick wakes settingsLoop: a local change, or a peer's
	// nudge.
	settingsKick chan struct{}

	mu           sync.Mutex // guards the fields below, up to pmu
	inflight     map[reqKey]req
	pendStarted  []reqMsg
	pendFirst    []idMsg
	pendFinished []idMsg
	pendApprox   map[uint64]approxRec
	shared       map[uint64]approxRec
	// aloneLog is the routing decisions made while alone, oldest first
	// from aloneNext once full (a ring of maxShared): a starting peer
	// gets them in the answer to its hello. Appending is a sequential
	// write, where a shared-map insert cost a cache miss per block.
	aloneLog     []loggedApprox
	aloneNext    int
	aloneWorkers []string          // by loggedApprox.worker; a process sees few workers
	aloneIDs     map[string]uint32 // the index of each in aloneWorkers
	pendLinks    []Link
	pendResps    []idMsg
	settings     Settings
	pendSettings bool // tell the peers the entry changed
	pendPut      bool // settings changed here and not stored yet
	answerHello  bool
	seq          uint64

	pmu   sync.Mutex // guards peers
	peers map[string]*peer
	// alone: no peer is known. In-flight changes and routing decisions
	// then go unpublished (each would otherwise cost a message and its
	// echo on every request), and decisions are only logged (aloneLog):
	// a peer that appears says hello, and the answer to a hello carries
	// the whole in-flight set and the recent decisions; the full share
	// sent every FullEvery carries the in-flight set too.
	alone atomic.Bool
}

type peer struct {
	epoch    int64
	lastSeen time.Time
	reqs     map[reqKey]req // by worker and the peer's request ID
	fullID   uint64
	fullGot  int
	fullSeen map[reqKey]bool
}

// RandomID returns a fresh replica ID, "fe-" and 8 hex digits.
func RandomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "fe-" + hex.EncodeToString(b[:])
}

// New returns a Sharer; Run starts it.
func New(cfg Config) (*Sharer, error) {
	if cfg.NC == nil || cfg.Apply == nil {
		return nil, errors.New("replica: NC and Apply are required")
	}
	if cfg.ID == "" {
		cfg.ID = RandomID()
	}
	if err := bus.ValidateName("replica id", cfg.ID); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.MinGap, 2*time.Millisecond)
	def(&cfg.FlushEvery, 50*time.Millisecond)
	def(&cfg.FullEvery, 500*time.Millisecond)
	def(&cfg.PeerTTL, 1500*time.Millisecond)
	def(&cfg.ApproxTTL, 120*time.Second)
	def(&cfg.ApproxRefresh, cfg.ApproxTTL/4)
	if cfg.MaxPendingApprox <= 0 {
		cfg.MaxPendingApprox = 32768
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sharer{
		cfg: cfg, log: cfg.Logger.With("replica", cfg.ID), epoch: cfg.Now().UnixNano(),
		kick: make(chan struct{}, 1), settingsKick: make(chan struct{}, 1),
		inflight: map[reqKey]req{}, pendApprox: map[uint64]approxRec{}, shared: map[uint64]approxRec{}, aloneIDs: map[string]uint32{},
		peers: map[string]*peer{},
	}
	s.alone.Store(true)
	s.m = newMetrics(s)
	if cfg.Registerer != nil {
		if err := s.m.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ID is this replica's name among its peers.
func (s *Sharer) ID() string {
	if s == nil {
		return ""
	}
	return s.cfg.ID
}

func (s *Sharer) pokeUnlessAlone() {
	if !s.alone.Load() {
		s.poke()
	}
}

func (s *Sharer) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Started records a request this replica sent to worker. A repeated
// Started with other blocks, before the first token, updates them (the
// router's Started does the same).
func (s *Sharer) Started(worker, requestID string, prefillBlocks, promptBlocks int) {
	if s == nil {
		return
	}
	k := reqKey{worker, requestID}
	s.mu.Lock()
	if r, dup := s.inflight[k]; !dup || !r.decoding && (r.prefill != prefillBlocks || r.prompt != promptBlocks) {
		s.inflight[k] = req{prefill: prefillBlocks, prompt: promptBlocks}
		if !s.alone.Load() {
			s.pendStarted = append(s.pendStarted, reqMsg{ID: requestID, Worker: worker, Prefill: prefillBlocks, Prompt: promptBlocks})
		}
	}
	s.mu.Unlock()
	s.pokeUnlessAlone()
}

// FirstToken records that a request's prefill is done.
func (s *Sharer) FirstToken(worker, requestID string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	k := reqKey{worker, requestID}
	if r, ok := s.inflight[k]; ok && !r.decoding {
		r.decoding = true
		s.inflight[k] = r
		if !s.alone.Load() {
			s.pendFirst = append(s.pendFirst, idMsg{ID: requestID, Worker: worker})
		}
	}
	s.mu.Unlock()
	s.pokeUnlessAlone()
}

// Finished records that a request is done.
func (s *Sharer) Finished(worker, requestID string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	k := reqKey{worker, requestID}
	if _, ok := s.inflight[k]; ok {
		delete(s.inflight, k)
		if !s.alone.Load() {
			s.pendFinished = append(s.pendFinished, idMsg{ID: requestID, Worker: worker})
		}
	}
	s.mu.Unlock()
	s.pokeUnlessAlone()
}

// Approx records a routing decision: hashes sent to worker at at.
func (s *Sharer) Approx(worker string, hashes []uint64, at time.Time) {
	if s == nil || len(hashes) == 0 {
		return
	}
	ns := at.UnixNano()
	refresh := int64(s.cfg.ApproxRefresh)
	if s.alone.Load() {
		s.mu.Lock()
		id, ok := s.aloneIDs[worker]
		if !ok {
			id = uint32(len(s.aloneWorkers))
			s.aloneWorkers = append(s.aloneWorkers, worker)
			s.aloneIDs[worker] = id
		}
		for _, h := range hashes {
			rec := loggedApprox{hash: h, at: ns, worker: id}
			if len(s.aloneLog) < maxShared {
				s.aloneLog = append(s.aloneLog, rec)
			} else {
				s.aloneLog[s.aloneNext] = rec
				s.aloneNext = (s.aloneNext + 1) % maxShared
			}
		}
		s.mu.Unlock()
		return
	}
	dropped := 0
	s.mu.Lock()
	if len(s.shared)+len(hashes) > maxShared {
		// Forget what was shared: at worst some hashes are sent again.
		clear(s.shared)
	}
	for _, h := range hashes {
		if prev, ok := s.shared[h]; ok && prev.worker == worker && ns-prev.at < refresh {
			continue
		}
		if _, ok := s.pendApprox[h]; !ok && len(s.pendApprox) >= s.cfg.MaxPendingApprox {
			dropped++
			continue
		}
		rec := approxRec{worker: worker, at: ns}
		s.pendApprox[h] = rec
		s.shared[h] = rec
	}
	s.mu.Unlock()
	if dropped > 0 {
		s.m.dropped.WithLabelValues("approx").Add(float64(dropped))
	}
}

// Probed shares a link this replica measured.
func (s *Sharer) Probed(l Link) {
	if s == nil {
		return
	}
	l.Sync = false
	s.mu.Lock()
	s.pendLinks = append(s.pendLinks, l)
	s.mu.Unlock()
	s.poke()
}

// StoredResponse shares that worker stored response id (Responses API),
// so that a request continuing it through a peer goes there too. Peers
// that start later do not learn it: a stored response outlives no
// frontend restart either.
func (s *Sharer) StoredResponse(id, worker string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if len(s.pendResps) < maxPendingResponses {
		s.pendResps = append(s.pendResps, idMsg{ID: id, Worker: worker})
	}
	s.mu.Unlock()
	s.poke()
}

// maxPendingResponses bounds the response ids waiting for one flush (a
// flush is due within FlushEvery; this is far more than a frontend
// answers in that time).
const maxPendingResponses = 4096

// SetSettings shares settings an operator changed on this replica and
// returns them as stamped.
func (s *Sharer) SetSettings(policy, disagg string) Settings {
	if s == nil {
		return Settings{}
	}
	s.mu.Lock()
	v := max(s.cfg.Now().UnixNano(), s.settings.Version+1)
	s.settings = Settings{Policy: policy, Disagg: disagg, Version: v, By: s.cfg.ID}
	s.pendPut = true
	st := s.settings
	s.mu.Unlock()
	s.kickSettings()
	return st
}

// Leader reports whether this replica has the smallest ID among the live
// ones: it probes new links for all of them.
func (s *Sharer) Leader() bool {
	if s == nil {
		return true
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	for id := range s.peers {
		if id < s.cfg.ID {
			return false
		}
	}
	return true
}

// PeerStatus is one peer in Status.
type PeerStatus struct {
	ID       string  `json:"id"`
	AgeS     float64 `json:"last_seen_s"`
	InFlight int     `json:"inflight"`
}

// Status is this replica's view of the sharing, for /admin/cluster.
type Status struct {
	ID       string       `json:"id"`
	InFlight int          `json:"inflight"`
	Peers    []PeerStatus `json:"peers"`
	Settings Settings     `json:"settings"`
}

// Status reports this replica's share and its peers.
func (s *Sharer) Status() Status {
	s.mu.Lock()
	st := Status{ID: s.cfg.ID, InFlight: len(s.inflight), Settings: s.settings, Peers: []PeerStatus{}}
	s.mu.Unlock()
	now := s.cfg.Now()
	s.pmu.Lock()
	for id, p := range s.peers {
		st.Peers = append(st.Peers, PeerStatus{ID: id, AgeS: now.Sub(p.lastSeen).Seconds(), InFlight: len(p.reqs)})
	}
	s.pmu.Unlock()
	slices.SortFunc(st.Peers, func(a, b PeerStatus) int {
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	return st
}

// Run subscribes to the peers, announces this replica and publishes its
// share until ctx ends.
func (s *Sharer) Run(ctx context.Context) error {
	sub, err := s.cfg.NC.Subscribe(s.cfg.Subjects.Replicas(), s.receive)
	if err != nil {
		return fmt.Errorf("replica: subscribe to %s: %w", s.cfg.Subjects.Replicas(), err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	settingsDone := make(chan struct{})
	sctx, stopSettings := context.WithCancel(ctx)
	go func() {
		defer close(settingsDone)
		s.settingsLoop(sctx)
	}()
	defer func() { stopSettings(); <-settingsDone }()
	s.publish([]*message{{Hello: true}})

	flush := time.NewTicker(s.cfg.FlushEvery)
	defer flush.Stop()
	full := time.NewTicker(s.cfg.FullEvery)
	defer full.Stop()
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
			s.flush(false)
			// Coalesce what arrives in the next MinGap into one message.
			gap.Reset(s.cfg.MinGap)
			select {
			case <-ctx.Done():
				return nil
			case <-gap.C:
			}
		case <-flush.C:
			s.flush(false)
		case <-full.C:
			s.flush(true)
			s.expire()
		}
	}
}

// flush publishes what is pending; with full (or a peer's hello pending),
// the whole in-flight set instead of the in-flight changes.
func (s *Sharer) flush(full bool) {
	s.mu.Lock()
	hello := s.answerHello
	full = full || hello
	s.answerHello = false
	var msgs []*message
	var base message
	if full {
		reqs := make([]reqMsg, 0, len(s.inflight))
		for k, r := range s.inflight {
			reqs = append(reqs, reqMsg{ID: k.id, Worker: k.worker, Prefill: r.prefill, Prompt: r.prompt, Decoding: r.decoding})
		}
		s.pendStarted, s.pendFirst, s.pendFinished = s.pendStarted[:0], s.pendFirst[:0], s.pendFinished[:0]
		parts := max(1, (len(reqs)+maxReqsPerMsg-1)/maxReqsPerMsg)
		s.seq++
		id := s.seq
		for p := 0; p < parts; p++ {
			lo, hi := p*maxReqsPerMsg, min(len(reqs), (p+1)*maxReqsPerMsg)
			msgs = append(msgs, &message{Full: &fullPart{ID: id, Part: p, Parts: parts}, Started: reqs[lo:hi]})
		}
	} else {
		for lo := 0; lo < len(s.pendStarted); lo += maxReqsPerMsg {
			msgs = append(msgs, &message{Started: slices.Clone(s.pendStarted[lo:min(len(s.pendStarted), lo+maxReqsPerMsg)])})
		}
		base.First = slices.Clone(s.pendFirst)
		base.Finished = slices.Clone(s.pendFinished)
		s.pendStarted, s.pendFirst, s.pendFinished = s.pendStarted[:0], s.pendFirst[:0], s.pendFinished[:0]
	}
	base.Links = s.pendLinks
	s.pendLinks = nil
	base.Responses = s.pendResps
	s.pendResps = nil
	if s.pendSettings || hello && s.settings.Version > 0 {
		st := s.settings
		base.Settings = &st
		s.pendSettings = false
	}
	var approx map[uint64]approxRec
	if len(s.pendApprox) > 0 {
		approx = s.pendApprox
		s.pendApprox = map[uint64]approxRec{}
	}
	if hello {
		oldest := s.cfg.Now().Add(-s.cfg.ApproxTTL).UnixNano()
		if approx == nil {
			approx = map[uint64]approxRec{}
		}
		for h, r := range s.shared {
			if _, ok := approx[h]; !ok && r.at >= oldest {
				approx[h] = r
			}
		}
		for _, r := range s.aloneLog {
			if cur, ok := approx[r.hash]; r.at >= oldest && (!ok || cur.at < r.at) {
				approx[r.hash] = approxRec{worker: s.aloneWorkers[r.worker], at: r.at}
			}
		}
	}
	s.mu.Unlock()

	if hello && s.cfg.Links != nil {
		for _, l := range s.cfg.Links() {
			l.Sync = true
			base.Links = append(base.Links, l)
		}
	}
	if len(base.First)+len(base.Finished)+len(base.Links)+len(base.Responses) > 0 || base.Settings != nil {
		// In-flight changes go after the starts they refer to.
		msgs = append(msgs, &base)
	}
	msgs = append(msgs, approxMessages(approx)...)
	s.publish(msgs)
}

// approxMessages groups records by worker and decision time and packs them
// into bounded messages. The time is kept to the nanosecond: replicas that
// decided one hash differently within a millisecond must agree on which
// decision came last, or each would keep its own.
func approxMessages(recs map[uint64]approxRec) []*message {
	if len(recs) == 0 {
		return nil
	}
	type key struct {
		worker string
		at     int64
	}
	groups := map[key][]uint64{}
	for h, r := range recs {
		k := key{r.worker, r.at}
		groups[k] = append(groups[k], h)
	}
	var msgs []*message
	cur, n := &message{}, 0
	for k, hs := range groups {
		for len(hs) > 0 {
			take := min(len(hs), maxHashesPerMsg-n)
			buf := make([]byte, 8*take)
			for i, h := range hs[:take] {
				binary.LittleEndian.PutUint64(buf[8*i:], h)
			}
			cur.Approx = append(cur.Approx, approxMsg{Worker: k.worker, At: k.at, Hashes: buf})
			hs, n = hs[take:], n+take
			if n == maxHashesPerMsg {
				msgs = append(msgs, cur)
				cur, n = &message{}, 0
			}
		}
	}
	if n > 0 {
		msgs = append(msgs, cur)
	}
	return msgs
}

func (s *Sharer) publish(msgs []*message) {
	for _, m := range msgs {
		s.mu.Lock()
		s.seq++
		m.Seq = s.seq
		s.mu.Unlock()
		m.Replica, m.Epoch = s.cfg.ID, s.epoch
		data, err := json.Marshal(m)
		if err != nil {
			s.log.Error("replica: encode message", "err", err) // cannot happen: plain types
			continue
		}
		if err := s.cfg.NC.Publish(s.cfg.Subjects.Replicas(), data); err != nil {
			s.m.dropped.WithLabelValues("publish").Inc()
			continue
		}
		s.m.messages.WithLabelValues("sent").Inc()
		s.m.bytes.WithLabelValues("sent").Add(float64(len(data)))
	}
}

// expire drops peers not heard from within PeerTTL.
func (s *Sharer) expire() {
	now := s.cfg.Now()
	var gone []string
	s.pmu.Lock()
	for id, p := range s.peers {
		if now.Sub(p.lastSeen) > s.cfg.PeerTTL {
			s.dropPeer(id, p)
			delete(s.peers, id)
			s.alone.Store(len(s.peers) == 0)
			gone = append(gone, id)
		}
	}
	s.pmu.Unlock()
	for _, id := range gone {
		s.m.expired.Inc()
		s.log.Warn("frontend replica went silent: its share of the load is dropped", "peer", id, "after", s.cfg.PeerTTL)
	}
	if len(gone) > 0 && s.cfg.OnPeersChanged != nil {
		s.cfg.OnPeersChanged()
	}
}

// dropPeer takes a peer's requests off the router. Caller holds pmu.
func (s *Sharer) dropPeer(id string, p *peer) {
	for k := range p.reqs {
		s.cfg.Apply.Dropped(k.worker, id+"/"+k.id)
	}
	clear(p.reqs)
}

// receive applies one peer message. It runs on the subscription's
// goroutine.
func (s *Sharer) receive(nm *nats.Msg) {
	// Frontends publish without headers. A message with them was put here
	// by the server itself, answering a JetStream request that named this
	// subject as its reply (a direct get carries Nats-Stream): whatever
	// it holds, no frontend said it.
	if len(nm.Header) > 0 {
		s.m.dropped.WithLabelValues("foreign").Inc()
		return
	}
	var m message
	if err := json.Unmarshal(nm.Data, &m); err != nil || m.Replica == "" {
		s.m.dropped.WithLabelValues("malformed").Inc()
		s.log.Warn("replica: malformed message dropped", "subject", nm.Subject, "bytes", len(nm.Data), "err", err)
		return
	}
	if m.Replica == s.cfg.ID {
		if m.Epoch != s.epoch {
			s.m.dropped.WithLabelValues("duplicate_id").Inc()
			s.log.Error("another frontend replica uses this replica's id: give each a unique --replica-id", "id", m.Replica)
		}
		return
	}
	s.m.messages.WithLabelValues("received").Inc()
	s.m.bytes.WithLabelValues("received").Add(float64(len(nm.Data)))
	now := s.cfg.Now()
	added := false

	s.pmu.Lock()
	p := s.peers[m.Replica]
	if p != nil && m.Epoch < p.epoch {
		s.pmu.Unlock()
		return // from an earlier run of that replica
	}
	if p != nil && m.Epoch > p.epoch {
		s.dropPeer(m.Replica, p) // it restarted: what it had in flight is gone
		p = nil
	}
	if p == nil {
		p = &peer{epoch: m.Epoch, reqs: map[reqKey]req{}}
		s.peers[m.Replica] = p
		s.alone.Store(false)
		added = true
	}
	p.lastSeen = now
	key := func(id string) string { return m.Replica + "/" + id }
	start := func(r reqMsg) {
		k := reqKey{r.Worker, r.ID}
		cur, ok := p.reqs[k]
		if !ok || !cur.decoding && (cur.prefill != r.Prefill || cur.prompt != r.Prompt) {
			cur.prefill, cur.prompt = r.Prefill, r.Prompt
			s.cfg.Apply.Started(r.Worker, key(r.ID), r.Prefill, r.Prompt)
		}
		if r.Decoding && !cur.decoding {
			cur.decoding = true
			s.cfg.Apply.FirstToken(r.Worker, key(r.ID))
		}
		p.reqs[k] = cur
	}
	for _, r := range m.Started {
		start(r)
	}
	if f := m.Full; f != nil {
		if f.Part == 0 || f.ID != p.fullID {
			p.fullID, p.fullGot, p.fullSeen = f.ID, 0, map[reqKey]bool{}
		}
		p.fullGot++
		for _, r := range m.Started {
			p.fullSeen[reqKey{r.Worker, r.ID}] = true
		}
		if f.Part == f.Parts-1 && p.fullGot == f.Parts {
			for k := range p.reqs {
				if !p.fullSeen[k] {
					delete(p.reqs, k)
					s.cfg.Apply.Finished(k.worker, key(k.id))
				}
			}
			p.fullSeen = nil
		}
	}
	for _, r := range m.First {
		k := reqKey{r.Worker, r.ID}
		if cur, ok := p.reqs[k]; ok && !cur.decoding {
			cur.decoding = true
			p.reqs[k] = cur
			s.cfg.Apply.FirstToken(r.Worker, key(r.ID))
		}
	}
	for _, r := range m.Finished {
		k := reqKey{r.Worker, r.ID}
		if _, ok := p.reqs[k]; ok {
			delete(p.reqs, k)
			s.cfg.Apply.Finished(r.Worker, key(r.ID))
		}
	}
	s.pmu.Unlock()

	if m.Hello || added {
		// A newcomer, or a peer back after it was dropped (it heard no
		// in-flight changes while this replica was alone): send it the
		// whole state now.
		s.mu.Lock()
		s.answerHello = true
		s.mu.Unlock()
		s.poke()
	}
	oldest := now.Add(-s.cfg.ApproxTTL).UnixNano()
	for _, a := range m.Approx {
		if len(a.Hashes)%8 != 0 || a.Worker == "" {
			s.m.dropped.WithLabelValues("malformed").Inc()
			continue
		}
		if a.At < oldest {
			continue
		}
		hs := make([]uint64, len(a.Hashes)/8)
		for i := range hs {
			hs[i] = binary.LittleEndian.Uint64(a.Hashes[8*i:])
		}
		s.cfg.Apply.RecordApprox(a.Worker, hs, time.Unix(0, a.At))
		// What the peers last heard for these hashes is now this record:
		// a later local decision for another worker must be sent, or the
		// replicas' views would drift apart and each keep its own copy.
		s.mu.Lock()
		if len(s.shared)+len(hs) > maxShared {
			clear(s.shared)
		}
		for _, h := range hs {
			if prev, ok := s.shared[h]; !ok || prev.at <= a.At {
				s.shared[h] = approxRec{worker: a.Worker, at: a.At}
			}
		}
		s.mu.Unlock()
	}
	for _, l := range m.Links {
		if l.From != "" && l.To != "" && l.BytesPerSec > 0 {
			s.cfg.Apply.Link(l)
		}
	}
	for _, r := range m.Responses {
		if r.ID != "" && r.Worker != "" {
			s.cfg.Apply.StoredResponse(r.ID, r.Worker)
		}
	}
	if m.Settings != nil {
		// Only a nudge: what it says is read from the entry, which no
		// message can outbid.
		s.kickSettings()
	}
	if added && s.cfg.OnPeersChanged != nil {
		s.cfg.OnPeersChanged()
	}
}
