package bus

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/prom"
)

// LoadReport is a worker's queue and cache state, published a few times a
// second for the router and the disaggregation gate. JSON on the wire: the
// rate is low and the format is easy to inspect with `nats sub`.
type LoadReport struct {
	WorkerID            string  `json:"worker_id"`
	Running             int     `json:"running"`
	Waiting             int     `json:"waiting"`
	QueuedPrefillTokens int     `json:"queued_prefill_tokens"`
	ActiveDecodeBlocks  int     `json:"active_decode_blocks"`
	KVUsage             float64 `json:"kv_usage"` // 0–1
	UsedBlocks          int     `json:"used_blocks"`
	TotalBlocks         int     `json:"total_blocks"`
	UnixNano            int64   `json:"unix_nano"`
	// Drift is set by bridges only (nil for Switchyard's own workers):
	// what the bridge received from its engine and could not index.
	Drift *Drift `json:"drift,omitempty"`
	// LoRA is the worker's LoRA adapter slots; nil when it serves none.
	LoRA *LoRAState `json:"lora,omitempty"`
}

// LoRAState is a worker's LoRA adapters, as vLLM's
// vllm:lora_requests_info reports them.
type LoRAState struct {
	Max     int      `json:"max_loras"`         // adapters in GPU memory at once
	Running []string `json:"running,omitempty"` // adapters of running requests
	Waiting []string `json:"waiting,omitempty"` // adapters of requests waiting to be scheduled
	// Resident are the adapters in GPU memory, when the worker can tell
	// (the simulator); a bridge knows only Running.
	Resident []string `json:"resident,omitempty"`
}

// Drift counts, since the bridge started, the engine events it received and
// what it had to drop or set apart. Every field only grows. A share of
// Events that keeps growing in OrphanParent, RemovedUnknownBlock or BadEvent
// means the bridge's mirror, and so the frontend's index for that worker,
// is drifting from what the engine holds.
type Drift struct {
	// Events is every engine event received, whatever became of it, with
	// a BlockRemoved counted once per block it names (the unit of
	// RemovedUnknownBlock), so the drop counters are a share of it.
	Events uint64 `json:"events"`
	// OrphanParent: BlockStored events whose parent block the bridge did
	// not hold. Their blocks are indexed under an unknown-parent root, so
	// later blocks of the same chain still link, but no request's prefix
	// can match them.
	OrphanParent uint64 `json:"orphan_parent"`
	// RemovedUnknownBlock: blocks (not events) named by BlockRemoved that
	// the bridge did not hold: a stored event was lost or not understood.
	RemovedUnknownBlock uint64 `json:"removed_unknown_block"`
	// BadEvent: events inconsistent in themselves (token count against
	// block count, unreadable extra_keys), not indexed.
	BadEvent uint64 `json:"bad_event"`
	// SkippedGroup: events of another KV cache group or attention kind
	// (hybrid models' sliding-window or mamba groups). Skipping them is
	// correct, not loss; they are counted so a share can be told apart.
	SkippedGroup uint64 `json:"skipped_group"`
	// Rebuilds: times whole batches were lost for good (a sequence gap
	// replay could not cover, an undecodable payload) and the bridge
	// cleared the worker's index.
	Rebuilds uint64 `json:"rebuilds"`
}

// Dropped is the number of events (removals counted by block) that the
// bridge received and could not apply as the engine meant: orphans,
// unknown removals and bad events. Skipped groups are not drops.
func (d Drift) Dropped() uint64 { return d.OrphanParent + d.RemovedUnknownBlock + d.BadEvent }

// DefaultLoadEvery is how often RunLoadReporter publishes.
const DefaultLoadEvery = 250 * time.Millisecond

// PublishLoad publishes one report on its worker's load subject.
func PublishLoad(nc *nats.Conn, subj Subjects, r LoadReport) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("bus: encode load report: %w", err)
	}
	if err := nc.Publish(subj.Load(r.WorkerID), data); err != nil {
		return fmt.Errorf("bus: publish load report for %s: %w", r.WorkerID, err)
	}
	return nil
}

// RunLoadReporter publishes report() every every (0 means DefaultLoadEvery)
// until ctx ends. Publish failures are logged; it returns nil when ctx ends.
func RunLoadReporter(ctx context.Context, nc *nats.Conn, subj Subjects, every time.Duration, report func() LoadReport, log *slog.Logger) error {
	if every <= 0 {
		every = DefaultLoadEvery
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var lastErr time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r := report()
			if r.UnixNano == 0 {
				r.UnixNano = time.Now().UnixNano()
			}
			if err := PublishLoad(nc, subj, r); err != nil && time.Since(lastErr) > 10*time.Second {
				lastErr = time.Now()
				log.Warn("load report not published", "worker", r.WorkerID, "err", err)
			}
		}
	}
}

// LoadSubscription is a live subscription to every worker's load reports.
type LoadSubscription struct {
	*nats.Subscription
	rejected atomic.Uint64
}

// Rejected counts reports dropped because they did not decode or named
// another worker than their subject.
func (s *LoadSubscription) Rejected() uint64 { return s.rejected.Load() }

// Register adds switchyard_bus_load_reports_rejected_total to reg.
func (s *LoadSubscription) Register(reg prometheus.Registerer) error {
	return prom.Register(reg, "bus", prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "switchyard_bus_load_reports_rejected_total",
		Help: "Load reports dropped: undecodable, or naming another worker than their subject.",
	}, func() float64 { return float64(s.rejected.Load()) }))
}

// SubscribeLoad calls fn for every load report in the namespace, from one
// NATS delivery goroutine. The worker is the one the subject names: on an
// authenticated bus the subject is the only part of a message the server
// vouches for (a worker may publish only on its own), so a report whose
// worker_id names anyone else is a forgery and is dropped, as are reports
// that do not decode; both are counted.
func SubscribeLoad(nc *nats.Conn, subj Subjects, fn func(LoadReport)) (*LoadSubscription, error) {
	s := &LoadSubscription{}
	prefix := subj.LoadPrefix()
	sub, err := nc.Subscribe(subj.LoadAll(), func(m *nats.Msg) {
		id, _ := strings.CutPrefix(m.Subject, prefix)
		var r LoadReport
		// Workers publish without headers; one with them is the server's
		// answer to a request someone aimed here.
		if len(m.Header) > 0 || json.Unmarshal(m.Data, &r) != nil || r.WorkerID != id || ValidateName("worker id", id) != nil {
			s.rejected.Add(1)
			return
		}
		fn(r)
	})
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe load reports: %w", err)
	}
	s.Subscription = sub
	return s, nil
}
