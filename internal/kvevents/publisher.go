package kvevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/switchyard-llm/switchyard/internal/bus"
)

// DefaultHeartbeatEvery is the longest an idle publisher stays quiet.
const DefaultHeartbeatEvery = time.Second

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	NC       *nats.Conn
	Subjects bus.Subjects
	WorkerID string
	// Epoch identifies this run of the worker; 0 means NewEpoch().
	Epoch uint64
	// HeartbeatEvery bounds the silence between batches; 0 means
	// DefaultHeartbeatEvery.
	HeartbeatEvery time.Duration
	Logger         *slog.Logger
}

var lastEpoch atomic.Uint64

// NewEpoch returns a fresh epoch: the wall clock in nanoseconds, bumped if
// needed so epochs from one process strictly increase. A restarted worker
// thus gets a larger epoch than its previous run, which lets the consumer
// tell stale batches of a dead run from the new one.
func NewEpoch() uint64 {
	for {
		old := lastEpoch.Load()
		e := max(uint64(time.Now().UnixNano()), old+1)
		if lastEpoch.CompareAndSwap(old, e) {
			return e
		}
	}
}

// Publisher publishes one worker's KV events. Its methods are safe for
// concurrent use; batches go out in sequence order.
type Publisher struct {
	nc       *nats.Conn
	subject  string
	snapSubj string
	worker   string
	epoch    uint64
	every    time.Duration
	log      *slog.Logger

	mu       sync.Mutex // guards the fields below; ordered after the engine's lock
	seq      uint64
	buf      []byte
	batch    Batch
	lastPub  time.Time
	skipNext uint64 // test hook: sequence numbers to skip before the next batch
	errLog   time.Time

	published atomic.Uint64
	failed    atomic.Uint64
}

// NewPublisher validates cfg and returns a Publisher.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.NC == nil {
		return nil, errors.New("kvevents: publisher: no NATS connection")
	}
	if err := bus.ValidateName("worker id", cfg.WorkerID); err != nil {
		return nil, fmt.Errorf("kvevents: publisher: %w", err)
	}
	p := &Publisher{
		nc:       cfg.NC,
		subject:  cfg.Subjects.KVEvents(cfg.WorkerID),
		snapSubj: cfg.Subjects.Snapshot(cfg.WorkerID),
		worker:   cfg.WorkerID,
		epoch:    cfg.Epoch,
		every:    cfg.HeartbeatEvery,
		log:      cfg.Logger,
		lastPub:  time.Now(),
	}
	if p.epoch == 0 {
		p.epoch = NewEpoch()
	}
	if p.every <= 0 {
		p.every = DefaultHeartbeatEvery
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// Epoch is this publisher's epoch.
func (p *Publisher) Epoch() uint64 { return p.epoch }

// Seq is the sequence number of the last batch published.
func (p *Publisher) Seq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Published and Failed count batches handed to NATS and refused by it.
func (p *Publisher) Published() uint64 { return p.published.Load() }

// Failed counts batches NATS refused (connection closed, payload too big).
func (p *Publisher) Failed() uint64 { return p.failed.Load() }

// PublishStep publishes the events of one scheduler step as the next batch.
// It does nothing for an empty step (Run's heartbeats cover idle time). The
// engine calls it under its lock; it only encodes into a reused buffer and
// hands the bytes to the NATS connection's write buffer, so it does not
// wait on the network and does not allocate. The events are not retained.
func (p *Publisher) PublishStep(events []Event) {
	if len(events) == 0 {
		return
	}
	p.mu.Lock()
	p.publishLocked(events, false, time.Now())
	p.mu.Unlock()
}

func (p *Publisher) publishLocked(events []Event, heartbeat bool, now time.Time) {
	p.seq += 1 + p.skipNext
	p.skipNext = 0
	p.batch = Batch{WorkerID: p.worker, Epoch: p.epoch, Seq: p.seq, UnixNano: now.UnixNano(), Heartbeat: heartbeat, Events: events}
	p.buf = AppendBatch(p.buf[:0], &p.batch)
	p.batch.Events = nil
	p.lastPub = now
	if err := p.nc.Publish(p.subject, p.buf); err != nil {
		// The sequence number is spent: the consumer sees a gap and resyncs.
		p.failed.Add(1)
		if now.Sub(p.errLog) >= 10*time.Second {
			p.errLog = now
			p.log.Error("kv event batch not published; consumers will resync", "worker", p.worker, "seq", p.seq, "err", err)
		}
		return
	}
	p.published.Add(1)
}

// Run publishes a heartbeat whenever HeartbeatEvery passes without a batch,
// until ctx ends; it then returns nil.
func (p *Publisher) Run(ctx context.Context) error {
	t := time.NewTimer(p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			p.mu.Lock()
			due := p.lastPub.Add(p.every)
			if !now.Before(due) {
				p.publishLocked(nil, true, now)
				due = now.Add(p.every)
			}
			p.mu.Unlock()
			t.Reset(due.Sub(now))
		}
	}
}

// ServeSnapshots answers snapshot requests until ctx ends, then returns nil.
// snap must call fn with every block hash the worker holds, while holding
// the lock under which the engine calls PublishStep: the publisher reads its
// sequence number inside fn, which makes the pair (hashes, seq) consistent.
// fn may be called several times (chunks) under one lock hold; hashes need
// not outlive the call. A snapshot larger than the connection's max payload
// is answered with an error (about 900k blocks at the embedded server's
// 8 MiB).
func (p *Publisher) ServeSnapshots(ctx context.Context, snap func(fn func(hashes []uint64))) error {
	return p.ServeTieredSnapshots(ctx, func(fn func(Tier, []uint64)) {
		snap(func(hashes []uint64) { fn(TierGPU, hashes) })
	})
}

// ServeTieredSnapshots is ServeSnapshots for a worker with lower tiers: snap
// calls fn with the blocks of each tier (a block held in two tiers is given
// in both).
func (p *Publisher) ServeTieredSnapshots(ctx context.Context, snap func(fn func(t Tier, hashes []uint64))) error {
	sub, err := p.nc.Subscribe(p.snapSubj, func(m *nats.Msg) {
		s := Snapshot{WorkerID: p.worker, Epoch: p.epoch}
		called := false
		snap(func(t Tier, hashes []uint64) {
			if !called {
				called = true
				p.mu.Lock()
				s.Seq = p.seq
				p.mu.Unlock()
			}
			if t == TierGPU {
				s.Hashes = append(s.Hashes, hashes...)
				return
			}
			for i := range s.Lower {
				if s.Lower[i].Medium == t {
					s.Lower[i].Hashes = append(s.Lower[i].Hashes, hashes...)
					return
				}
			}
			s.Lower = append(s.Lower, TierHashes{Medium: t, Hashes: slices.Clone(hashes)})
		})
		if !called {
			s.Err = "worker produced no snapshot"
		}
		reply := AppendSnapshot(nil, &s)
		if int64(len(reply)) > p.nc.MaxPayload() {
			s = Snapshot{WorkerID: p.worker, Epoch: p.epoch,
				Err: fmt.Sprintf("snapshot of %d blocks is %d bytes, over the NATS max payload %d", len(s.Hashes), len(reply), p.nc.MaxPayload())}
			reply = AppendSnapshot(nil, &s)
		}
		if err := m.Respond(reply); err != nil {
			p.log.Warn("snapshot reply not sent", "worker", p.worker, "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("kvevents: subscribe %s: %w", p.snapSubj, err)
	}
	defer sub.Unsubscribe()
	// The subscription is re-sent on reconnect, so a failed flush only
	// delays readiness.
	if err := p.nc.FlushTimeout(5 * time.Second); err != nil {
		p.log.Warn("snapshot subscription not confirmed yet", "worker", p.worker, "err", err)
	}
	<-ctx.Done()
	return nil
}

// Resync makes every consumer drop what it holds for this worker and fetch a
// snapshot: the next batch (or heartbeat, within HeartbeatEvery) skips one
// sequence number, which consumers see as a gap. A bridge calls it when its
// engine lost events that replay could not recover; a consumer stays
// resyncing, routing on its approximate index, for as long as the snapshot
// function declines to answer.
func (p *Publisher) Resync() { p.skip(1) }

// skip makes the next batch jump n sequence numbers, as if n were lost.
func (p *Publisher) skip(n uint64) {
	p.mu.Lock()
	p.skipNext += n
	p.mu.Unlock()
}
