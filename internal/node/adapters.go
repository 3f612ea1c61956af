package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/frontend"
	"github.com/switchyard-llm/switchyard/internal/gate"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/router"
)

// adapters presents the frontend node's components through the interfaces
// the frontend package declares.
type adapters struct{ f *Frontend }

var (
	_ frontend.Workers     = adapters{}
	_ frontend.Router      = adapters{}
	_ frontend.EventHealth = adapters{}
	_ frontend.Gate        = adapters{}
	_ frontend.Index       = adapters{}
	_ frontend.Links       = adapters{}
	_ frontend.Prober      = adapters{}
	_ frontend.GateInfo    = adapters{}
	_ frontend.Predictor   = adapters{}
	_ frontend.BusHealth   = adapters{}
	_ frontend.InFlight    = (*router.Router)(nil)
	_ kvevents.IndexWriter = (*kvindex.Index)(nil)
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

func (a adapters) toWorker(w bus.WorkerInfo) frontend.Worker {
	fw := frontend.Worker{
		ID: w.ID, Role: w.Role, Model: w.Model, URL: w.HTTPURL, MaxModelLen: w.MaxModelLen,
		BlockSize: w.BlockSize, KVBlocks: w.KVBlocks, KVBytesPerToken: int64(w.KVBytesPerToken), KVXferAddr: w.KVXferAddr, Profile: w.Profile,
		Aliases: w.Aliases, Created: w.StartedUnixMilli / 1000, APIs: w.APIs, Draining: w.Draining,
	}
	if len(w.Adapters) > 0 {
		fw.Adapters = make([]frontend.Adapter, len(w.Adapters))
		for i, ad := range w.Adapters {
			fw.Adapters[i] = frontend.Adapter{Name: ad.Name, Root: ad.Root}
		}
	}
	if l, ok := a.f.load(w.ID); ok {
		fw.Load = frontend.Load{Running: l.Running, Waiting: l.Waiting, KVUsage: l.KVUsage}
		if d := l.Drift; d != nil {
			fw.Drift = &frontend.Drift{Events: d.Events, OrphanParent: d.OrphanParent, RemovedUnknownBlock: d.RemovedUnknownBlock,
				BadEvent: d.BadEvent, SkippedGroup: d.SkippedGroup, Rebuilds: d.Rebuilds}
		}
	}
	return fw
}

// List is the routable workers.
func (a adapters) List() []frontend.Worker {
	ws := a.f.watcher.Workers()
	out := make([]frontend.Worker, len(ws))
	for i, w := range ws {
		out[i] = a.toWorker(w)
	}
	return out
}

// BusStatus is the registry's reachability.
func (a adapters) BusStatus() frontend.BusStatus {
	state, since, cause := a.f.watcher.BusState()
	return frontend.BusStatus{Down: state != bus.BusUp, State: state, Since: since, Cause: cause}
}

// Refused is the workers refused for incompatibility.
func (a adapters) Refused() []frontend.Refusal {
	rs := a.f.watcher.Refused()
	out := make([]frontend.Refusal, len(rs))
	for i, r := range rs {
		out[i] = frontend.Refusal{ID: r.Worker.ID, Reason: r.Reason}
	}
	return out
}

// Pick routes one request among the candidates the frontend chose.
func (a adapters) Pick(_ context.Context, req frontend.RouteRequest) (frontend.Decision, error) {
	cands := make([]router.Worker, len(req.Candidates))
	for i, id := range req.Candidates {
		// A worker whose index the frontend found inconsistent with its
		// engine is routed by the approximate index, as an unhealthy one.
		healthy := a.f.consumer.Health(id) == kvevents.StateHealthy && !slices.Contains(req.IndexSuspect, id)
		cands[i] = router.Worker{ID: id, EventsHealthy: healthy}
		if w, ok := a.f.watcher.Worker(id); ok {
			p := w.Profile
			cands[i].Profile = &p
		}
		if req.Adapter != "" {
			cands[i].Adapter = a.f.adapterState(id, req.Adapter)
		}
	}
	bs := req.BlockSize
	if bs == 0 {
		bs = a.f.cfg.BlockSize
	}
	ms := a.f.cfg.Models[req.Model]
	d, err := a.f.router.Pick(&router.Request{ID: req.RequestID, Hashes: req.Hashes, PromptTokens: req.PromptTokens, OutputTokens: req.MaxTokens, BlockSize: bs,
		Policy: ms.Policy, Alpha: ms.Alpha}, cands)
	if err != nil {
		return frontend.Decision{}, err
	}
	dec := frontend.Decision{WorkerID: d.Worker, OverlapBlocks: d.OverlapBlocks, Policy: d.Policy, Approx: d.Approx, IndexBlocks: d.IndexBlocks,
		TierBlocks: [3]int{int(d.Tiers[0]), int(d.Tiers[1]), int(d.Tiers[2])}}
	if d.Deferred() {
		// A long prompt: its records, in this router's approximate index
		// and for the peer replicas, wait until the request is on its way.
		dec.After = func() {
			a.f.router.Record(d, req.Hashes)
			a.f.share.Approx(d.Worker, req.Hashes, time.Now())
		}
	} else {
		a.f.share.Approx(d.Worker, req.Hashes, time.Now())
	}
	if req.Adapter != "" {
		a.f.routedAdapter(d.Worker, req.Adapter)
	}
	return dec, nil
}

func (a adapters) Policy() string              { return a.f.router.Policy() }
func (a adapters) Policies() []string          { return a.f.router.Policies() }
func (a adapters) SetPolicy(name string) error { return a.f.router.SetPolicy(name) }

// EventStatus is the worker's KV-event health.
func (a adapters) EventStatus(id string) (frontend.EventStatus, bool) {
	h, ok := a.f.consumer.HealthOf(id)
	if !ok {
		return frontend.EventStatus{}, false
	}
	return frontend.EventStatus{
		State: h.State.String(), Cause: h.Cause, Epoch: h.Epoch, LastSeq: h.LastSeq, LastEventAge: h.LastEventAge,
		Batches: h.Batches, Blocks: h.Blocks, Gaps: h.Gaps, Resyncs: h.Resyncs, Malformed: h.Malformed,
		ImplausibleEpoch: h.Implausible, ResyncFailures: h.ResyncFailures,
		IndexedBlocks: tierMap(a.f.index.WorkerTierBlocks(id)), UnknownMedia: h.UnknownMedia,
	}, true
}

// Overlaps is the prefix index's answer for /admin/lookup.
func (a adapters) Overlaps(hashes []uint64) map[string]int {
	var ov kvindex.Overlaps
	a.f.index.Overlaps(hashes, &ov)
	out := make(map[string]int, len(ov.Hits))
	for _, h := range ov.Hits {
		out[h.Worker] = h.Blocks
	}
	return out
}

// gateInput builds the gate's view of a prefill worker p and decode worker
// d for a prompt: their timing profiles, queues and the link between them.
func (a adapters) gateInput(mode gate.Mode, n, cachedD, cachedP int, d, p bus.WorkerInfo, withLoad bool) gate.Input {
	view := func(w bus.WorkerInfo) gate.WorkerView {
		v := gate.WorkerView{ID: w.ID, Profile: w.Profile, BlockSize: w.BlockSize, KVBytesPerToken: w.KVBytesPerToken}
		if withLoad && w.ID != "" {
			if l, ok := a.f.load(w.ID); ok {
				v.Load = &gate.WorkerLoad{QueuedPrefillTokens: l.QueuedPrefillTokens, Waiting: l.Waiting, Running: l.Running, ActiveDecodeBlocks: l.ActiveDecodeBlocks}
			}
		}
		return v
	}
	return gate.InputFor(mode, n, cachedD, cachedP, view(d), view(p))
}

// QueueDelay predicts how long a new prompt would wait behind the
// prefill already queued on worker id, from its timing profile and last
// load report; false when either is unknown.
func (a adapters) QueueDelay(id string) (time.Duration, bool) {
	w, ok := a.f.watcher.Worker(id)
	if !ok || w.Profile.PeakFLOPS <= 0 {
		return 0, false
	}
	if _, ok := a.f.load(id); !ok {
		return 0, false
	}
	return a.gateInput(gate.ModeAuto, 0, 0, 0, w, bus.WorkerInfo{}, true).QueueD, true
}

// Decide runs the disaggregation gate for one request.
func (a adapters) Decide(_ context.Context, in frontend.GateInput) frontend.GateDecision {
	d, okD := a.f.watcher.Worker(in.Decode)
	p, _ := a.f.watcher.Worker(in.Prefill)
	if !okD {
		return frontend.GateDecision{Reason: "decode worker unknown"}
	}
	bs := d.BlockSize // the decode worker's model's, which the overlaps count in
	gi := a.gateInput(gate.Mode(in.Mode), in.PromptTokens, in.DecodeOverlapBlocks*bs, in.PrefillOverlapBlocks*bs, d, p, true)
	dec := a.f.gate.Decide(gi)
	if in.RequestID != "" {
		a.f.decMu.Lock()
		// Observe arrives only for streamed requests; bound what the rest
		// leave behind rather than track their lifetimes.
		if len(a.f.decisions) >= 4096 {
			clear(a.f.decisions)
		}
		a.f.decisions[in.RequestID] = dec
		a.f.decMu.Unlock()
	}
	return frontend.GateDecision{
		Remote: dec.Choice == gate.ChoiceRemote, Reason: string(dec.Reason),
		PredictedLocal: dec.TLocal, PredictedRemote: dec.TRemote, KVBytes: dec.TransferBytes,
	}
}

// Observe records the measured TTFT against the gate's prediction.
func (a adapters) Observe(o frontend.Observation) {
	a.f.decMu.Lock()
	dec, ok := a.f.decisions[o.RequestID]
	delete(a.f.decisions, o.RequestID)
	a.f.decMu.Unlock()
	if ok && o.TTFT > 0 {
		a.f.gate.Observe(dec, o.TTFT)
	}
	// The transfer itself (o.Transfer, o.KVBytes) is not fed to the link
	// estimator here: the decode worker reports every pull on the bus, which
	// reaches every frontend, so counting it again would weigh it twice.
}

// Settings reports the gate's tunables.
func (a adapters) Settings() frontend.GateSettings {
	c := a.f.gate.Config()
	return frontend.GateSettings{Margin: c.Margin, TTFTSLO: c.TTFTSLO, ITLSLO: c.ITLSLO}
}

// Link reports the estimate of one link.
func (a adapters) Link(from, to string) (frontend.LinkStatus, bool) {
	for _, e := range a.f.gate.Links().Snapshot() {
		if e.From == from && e.To == to {
			return frontend.LinkStatus{BytesPerSec: e.BytesPerSec, RTT: e.RTT, Measured: e.Measured, Samples: e.Samples, Emulated: a.f.cfg.LinkLabel}, true
		}
	}
	return frontend.LinkStatus{Emulated: a.f.cfg.LinkLabel}, false
}

// Probe measures one link now.
func (a adapters) Probe(ctx context.Context, from, to frontend.Worker, nbytes int64) (frontend.ProbeResult, error) {
	p, ok1 := a.f.watcher.Worker(from.ID)
	d, ok2 := a.f.watcher.Worker(to.ID)
	if !ok1 || !ok2 {
		return frontend.ProbeResult{}, errors.New("node: probe: worker left the registry")
	}
	r, err := a.f.probe(ctx, p, d, nbytes)
	if err != nil {
		return frontend.ProbeResult{}, err
	}
	return frontend.ProbeResult{
		Bytes: r.Bytes, Duration: time.Duration(r.Seconds * float64(time.Second)), BytesPerSec: r.BytesPerSec,
		RTT: time.Duration(r.RTTMillis * float64(time.Millisecond)), Emulated: a.f.cfg.LinkLabel,
	}, nil
}

// Predict runs the gate's math at empty queues and empty caches.
func (a adapters) Predict(_ context.Context, in frontend.PredictInput) (frontend.Prediction, error) {
	p, ok1 := a.f.watcher.Worker(in.Prefill.ID)
	d, ok2 := a.f.watcher.Worker(in.Decode.ID)
	if !ok1 || !ok2 {
		return frontend.Prediction{}, fmt.Errorf("node: predict: unknown worker %q or %q", in.Prefill.ID, in.Decode.ID)
	}
	mode := gate.Mode(a.f.server.DisaggMode())
	var out frontend.Prediction
	for _, n := range in.PromptTokens {
		dec := a.f.gate.Predict(a.gateInput(mode, n, 0, 0, d, p, false))
		out.Predictions = append(out.Predictions, frontend.PromptPrediction{
			PromptTokens: n, KVBytes: dec.TransferBytes, Transfer: dec.TransferTime,
			LocalTTFT: dec.TLocal, RemoteTTFT: dec.TRemote, Choice: string(dec.Choice), Reason: string(dec.Reason),
		})
	}
	out.Link, _ = a.Link(p.ID, d.ID)
	return out, nil
}

// tierMap names per-tier counts for /health.
func tierMap(c [kvindex.NumTiers]int) map[string]int {
	return map[string]int{"gpu": c[kvindex.TierGPU], "cpu": c[kvindex.TierCPU], "disk": c[kvindex.TierDisk]}
}
