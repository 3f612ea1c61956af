// Package vllmpub publishes a simulated engine's KV events on ZeroMQ
// exactly as vLLM 0.26 does, so that Switchyard's bridge can be tested
// end to end without a GPU: a PUB socket sending [topic, seq, payload] with
// seq an 8-byte big-endian count from 0, msgpack KVEventBatch payloads
// (map events by default, vLLM's older tagged arrays on request), a replay
// ROUTER answering ["", seq] with every buffered batch from seq on and an
// end marker, and no heartbeats: an idle engine is silent.
//
// Block hashes are the engine's own, unrelated to Switchyard's: each is
// the Switchyard hash mixed with a seed drawn at start, as vLLM's differ
// between processes without PYTHONHASHSEED. The tokens of each block go in
// token_ids and a request's cache_salt in the first block's extra_keys, so
// a bridge must recompute its hashes from them as it would for vLLM.
//
// Config.Quirks make it speak as other vLLM-compatible engines have been
// seen to (root parents as 0, batches numbered from 1, events batched by
// count) or lose events on purpose, so that tests can drive a bridge and
// the frontend's index-agreement check with them.
//
// A Publisher's methods are safe for concurrent use. Sending happens on its
// own goroutine: PublishStepTokens never waits on the network, and a batch
// that finds the send queue full is dropped with its sequence number spent,
// as vLLM does with a failed publish.
package vllmpub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// Config configures a Publisher.
type Config struct {
	// Endpoint is where the PUB socket binds, e.g. tcp://127.0.0.1:5557.
	Endpoint string
	// ReplayEndpoint, if set, is where the replay ROUTER binds.
	ReplayEndpoint string
	// Topic is the first frame of every message; vLLM's default is "".
	Topic string
	// BufferSteps is how many batches replay can serve; 0 means vLLM's
	// default, 10000.
	BufferSteps int
	// BlockSize is the engine's block size (tokens per block).
	BlockSize int
	// Layout is the payload shape; the zero value is vLLM 0.26's.
	Layout enginewire.Layout
	// LegacyReplay answers replay in the older layout ["", seq, payload]
	// instead of vLLM 0.26's ["", topic, seq, payload].
	LegacyReplay bool
	// DPRank is the data_parallel_rank written in every batch.
	DPRank int
	// Quirks make the publisher send what other vLLM-compatible engines
	// send, or break on purpose; the zero value is vLLM's behaviour.
	Quirks Quirks
	Logger *slog.Logger
}

// Quirks are departures from vLLM's own publisher. The first three are
// legal on the wire and were seen from a third-party vLLM-compatible
// engine; a bridge must route from them. The last two lose information
// without any sign on the wire (no sequence gap), as an engine bug would:
// only comparing the index with what the engine served can catch them.
type Quirks struct {
	// ParentZero writes a request's first block with parent_block_hash 0
	// instead of nil.
	ParentZero bool
	// FirstSeq is the number of the first batch (vLLM's is 0); the replay
	// buffer starts there too.
	FirstSeq uint64
	// BatchEvents, when above 0, holds events back until that many have
	// accumulated and sends them as one batch, instead of one batch per
	// scheduler step. Events still held when the engine goes idle stay
	// unsent until more come.
	BatchEvents int
	// DropEvents is the share (0–1) of events never published, in no
	// batch and no replay, with the sequence kept gap-free.
	DropEvents float64
	// DropSeed seeds the choice of dropped events (0: a fixed seed).
	DropSeed uint64
	// SkipRemovals never publishes BlockRemoved: the engine evicts
	// blocks it keeps advertising.
	SkipRemovals bool
}

// Validate reports a quirk out of range.
func (q Quirks) Validate() error {
	switch {
	case q.BatchEvents < 0:
		return fmt.Errorf("vllmpub: batch of %d events: want 0 (one batch per step) or more", q.BatchEvents)
	case q.DropEvents < 0 || q.DropEvents > 1 || q.DropEvents != q.DropEvents:
		return fmt.Errorf("vllmpub: drop share %v: want 0..1", q.DropEvents)
	case q.FirstSeq >= enginewire.ReplayEnd:
		return fmt.Errorf("vllmpub: first sequence number %d is the replay end marker", q.FirstSeq)
	}
	return nil
}

type stored struct {
	seq     uint64
	payload []byte
}

// Publisher is a vLLM-wire KV event publisher. It implements
// sim.TokenPublisher.
type Publisher struct {
	cfg    Config
	log    *slog.Logger
	pub    zmq4.Socket
	router zmq4.Socket
	seed   uint64
	sendq  chan stored
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	seq    uint64     // next sequence number
	ring   []stored   // replay buffer, oldest first
	paused bool
	skip   uint64
	batch  enginewire.Batch
	buf    []byte
	held   []enginewire.Event // Quirks.BatchEvents: events not yet sent
	drops  *rand.Rand         // Quirks.DropEvents

	sent    atomic.Uint64
	dropped atomic.Uint64
}

var _ sim.TokenPublisher = (*Publisher)(nil)

// New binds the sockets and starts the sending goroutines; Close stops
// them.
func New(cfg Config) (*Publisher, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("vllmpub: no endpoint")
	}
	if cfg.BlockSize <= 0 {
		return nil, errors.New("vllmpub: block size must be positive")
	}
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = 10000
	}
	if err := cfg.Quirks.Validate(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, log: cfg.Logger, seed: rand.Uint64() | 1, sendq: make(chan stored, 4096), seq: cfg.Quirks.FirstSeq}
	if q := cfg.Quirks; q.DropEvents > 0 {
		p.drops = rand.New(rand.NewPCG(q.DropSeed, 0x5eed))
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.pub = zmq4.NewPub(ctx)
	if err := p.pub.Listen(cfg.Endpoint); err != nil {
		cancel()
		return nil, fmt.Errorf("vllmpub: bind PUB on %s: %w (pick another --kv-events-endpoint)", cfg.Endpoint, err)
	}
	if cfg.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx)
		if err := p.router.Listen(cfg.ReplayEndpoint); err != nil {
			p.pub.Close()
			cancel()
			return nil, fmt.Errorf("vllmpub: bind replay ROUTER on %s: %w", cfg.ReplayEndpoint, err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serveReplay(ctx)
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.send(ctx)
	}()
	return p, nil
}

// Endpoint is the PUB socket's bound endpoint (with the port picked when
// Config.Endpoint asked for port 0).
func (p *Publisher) Endpoint() string { return "tcp://" + p.pub.Addr().String() }

// ReplayEndpoint is the replay ROUTER's bound endpoint, or "".
func (p *Publisher) ReplayEndpoint() string {
	if p.router == nil {
		return ""
	}
	return "tcp://" + p.router.Addr().String()
}

// Close stops the goroutines and closes the sockets.
func (p *Publisher) Close() error {
	p.cancel()
	err := p.pub.Close()
	if p.router != nil {
		if e := p.router.Close(); err == nil {
			err = e
		}
	}
	p.wg.Wait()
	return err
}

// Sent counts batches handed to the PUB socket; Dropped counts batches
// that found the queue full or were suppressed by Pause.
func (p *Publisher) Sent() uint64    { return p.sent.Load() }
func (p *Publisher) Dropped() uint64 { return p.dropped.Load() }

// Seq is the next sequence number.
func (p *Publisher) Seq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Pause stops (true) or resumes sending batches while the engine keeps
// serving: the fault a bridge must detect from requests alone. Paused
// batches are lost for good, from the replay buffer too, their sequence
// numbers spent, as from an engine whose publisher thread died.
func (p *Publisher) Pause(on bool) {
	p.mu.Lock()
	p.paused = on
	p.mu.Unlock()
}

// Skip makes the next n batches vanish before sending while still entering
// the replay buffer: a subscriber sees a gap that replay can cover.
func (p *Publisher) Skip(n uint64) {
	p.mu.Lock()
	p.skip += n
	p.mu.Unlock()
}

// EngineHash is the engine-side hash this publisher gives the Switchyard
// hash h.
func (p *Publisher) EngineHash(h uint64) uint64 {
	x := h ^ p.seed
	x ^= x >> 31
	x *= 0x7fb5d329728ea185
	x ^= x >> 27
	return x
}

// PublishStep publishes events without tokens (blocks then carry zeros);
// the engine calls PublishStepTokens instead.
func (p *Publisher) PublishStep(events []kvevents.Event) { p.PublishStepTokens(events, nil) }

// PublishStepTokens encodes one scheduler step as the next batch.
func (p *Publisher) PublishStepTokens(events []kvevents.Event, st *sim.StepTokens) {
	if len(events) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.cfg.Quirks
	bs := p.cfg.BlockSize
	b := &p.batch
	b.TS = float64(time.Now().UnixNano()) / 1e9
	b.DPRank, b.HasDPRank = p.cfg.DPRank, true
	b.Events = b.Events[:0]
	tok := 0
	for _, e := range events {
		var ev enginewire.Event
		ev.Medium = mediumOf(e.Medium)
		switch e.Kind {
		case kvevents.Stored:
			ev.Kind = enginewire.BlockStored
			ev.BlockSize = bs
			ev.BlockHashes = make([]uint64, len(e.Hashes))
			for i, h := range e.Hashes {
				ev.BlockHashes[i] = p.EngineHash(h)
			}
			salt := ""
			if st != nil {
				salt = st.Salts[e.Hashes[0]]
			}
			if e.Parent != kvindex.Root("") && (salt == "" || e.Parent != kvindex.Root(salt)) {
				ev.Parent, ev.HasParent = p.EngineHash(e.Parent), true
			} else if q.ParentZero {
				ev.HasParent = true // and Parent 0
			}
			n := len(e.Hashes) * bs
			switch {
			case e.Medium != kvevents.TierGPU:
				// An offload of blocks stored on the GPU before: the same
				// engine hashes, and a bridge knows their tokens already.
				ev.TokenIDs = make([]uint32, n)
			case st != nil && tok+n <= len(st.Tokens):
				ev.TokenIDs = st.Tokens[tok : tok+n]
				if q.BatchEvents > 0 {
					// Held past this call, when the engine reuses st.
					ev.TokenIDs = append([]uint32(nil), ev.TokenIDs...)
				}
				tok += n
			default:
				ev.TokenIDs = make([]uint32, n)
				tok += n
			}
			if adapter, cacheSalt, ok := kvindex.SplitLoRASalt(salt); ok {
				// The simulator roots an adapter's chains as the bridge
				// does; on the wire they are named as vLLM names them.
				ev.LoraName, ev.LoraID = adapter, loraID(adapter)
				ev.RawExtraKeys = enginewire.AppendLoRAExtraKeys(nil, adapter, cacheSalt, len(e.Hashes))
			} else if salt != "" {
				ev.RawExtraKeys = enginewire.AppendExtraKeys(nil, salt, len(e.Hashes))
			}
		case kvevents.Removed:
			if q.SkipRemovals {
				continue
			}
			ev.Kind = enginewire.BlockRemoved
			ev.BlockHashes = make([]uint64, len(e.Hashes))
			for i, h := range e.Hashes {
				ev.BlockHashes[i] = p.EngineHash(h)
			}
		case kvevents.Cleared:
			ev.Kind = enginewire.AllBlocksCleared
		default:
			continue
		}
		if p.drops != nil && p.drops.Float64() < q.DropEvents {
			continue // after its tokens were taken, so the next event's are right
		}
		b.Events = append(b.Events, ev)
	}
	if q.BatchEvents > 0 {
		p.held = append(p.held, b.Events...)
		for len(p.held) >= q.BatchEvents {
			b.Events = append(b.Events[:0], p.held[:q.BatchEvents]...)
			p.held = append(p.held[:0], p.held[q.BatchEvents:]...)
			p.publishLocked(b)
		}
		return
	}
	if len(b.Events) == 0 {
		return // an engine sends no empty batch
	}
	p.publishLocked(b)
}

// publishLocked numbers b as the next batch, buffers it for replay and
// queues it for sending; p.mu is held.
func (p *Publisher) publishLocked(b *enginewire.Batch) {
	payload := enginewire.AppendBatch(nil, b, p.cfg.Layout)
	s := stored{seq: p.seq, payload: payload}
	p.seq++
	if p.paused {
		p.dropped.Add(1)
		return
	}
	p.ring = append(p.ring, s)
	if len(p.ring) > p.cfg.BufferSteps {
		p.ring = p.ring[len(p.ring)-p.cfg.BufferSteps:]
	}
	if p.skip > 0 {
		p.skip--
		return
	}
	select {
	case p.sendq <- s:
	default:
		p.dropped.Add(1)
	}
}

// loraID is the lora_id an adapter is published with: vLLM numbers the
// adapters it loads; a stable number per name stands for that here.
func loraID(adapter string) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(adapter); i++ {
		h = (h ^ uint64(adapter[i])) * 1099511628211
	}
	return int64(h>>34) + 1
}

func mediumOf(t kvevents.Tier) enginewire.Medium {
	switch t {
	case kvevents.TierCPU:
		return enginewire.MediumCPU
	case kvevents.TierDisk:
		return enginewire.MediumDisk
	}
	return enginewire.MediumGPU
}

func (p *Publisher) send(ctx context.Context) {
	topic := []byte(p.cfg.Topic)
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-p.sendq:
			err := p.pub.Send(zmq4.NewMsgFrom(topic, enginewire.AppendSeq(nil, s.seq), s.payload))
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.log.Warn("vllmpub: send failed", "seq", s.seq, "err", err)
				continue
			}
			p.sent.Add(1)
		}
	}
}

// serveReplay answers replay requests: ["", seq8] from a DEALER (the
// ROUTER prefixes the peer identity).
func (p *Publisher) serveReplay(ctx context.Context) {
	topic := []byte(p.cfg.Topic)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		f := msg.Frames
		if len(f) < 2 || len(f[len(f)-1]) != 8 {
			p.log.Warn("vllmpub: malformed replay request", "frames", len(f))
			continue
		}
		id := f[0]
		start, _, _, _ := enginewire.ParseReplay([][]byte{{}, f[len(f)-1], nil})
		p.mu.Lock()
		var out []stored
		for _, s := range p.ring {
			if s.seq >= start {
				out = append(out, s)
			}
		}
		p.mu.Unlock()
		end := enginewire.AppendSeq(nil, enginewire.ReplayEnd)
		for _, s := range out {
			seq := enginewire.AppendSeq(nil, s.seq)
			if p.cfg.LegacyReplay {
				err = p.router.Send(zmq4.NewMsgFrom(id, []byte{}, seq, s.payload))
			} else {
				err = p.router.Send(zmq4.NewMsgFrom(id, []byte{}, topic, seq, s.payload))
			}
			if err != nil {
				break
			}
		}
		if p.cfg.LegacyReplay {
			err = p.router.Send(zmq4.NewMsgFrom(id, []byte{}, end, []byte{}))
		} else {
			err = p.router.Send(zmq4.NewMsgFrom(id, []byte{}, []byte{}, end, []byte{}))
		}
		if err != nil && ctx.Err() == nil {
			p.log.Warn("vllmpub: replay reply failed", "err", err)
		}
	}
}
