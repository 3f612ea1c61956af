package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// Roles a worker can take; the same strings as the worker registry uses.
const (
	RoleAggregated = "aggregated"
	RolePrefill    = "prefill"
	RoleDecode     = "decode"
)

// Load is a worker's most recent load report.
type Load struct {
	Running int     `json:"running"`
	Waiting int     `json:"waiting"`
	KVUsage float64 `json:"kv_usage"` // 0–1
}

// Worker is one worker as the frontend sees it.
type Worker struct {
	ID          string
	Role        string // RoleAggregated, RolePrefill or RoleDecode
	Model       string
	URL         string // base URL of its OpenAI API, e.g. http://10.0.0.5:8001
	MaxModelLen int
	Load        Load
	// Aliases are other names Model is served under; Adapters the LoRA
	// adapters the worker serves on top of it.
	Aliases  []string
	Adapters []Adapter
	Created  int64 // when the worker started, Unix seconds; 0: unknown

	// Optional registry details, shown in /health when set.
	BlockSize       int    // KV block size in tokens
	KVBlocks        int    // KV cache capacity in blocks; 0: unknown
	KVBytesPerToken int64  // KV cache bytes one token occupies
	KVXferAddr      string // host:port of the worker's KV-transfer server
	Profile         any    // the worker's timing profile, as registered

	// APIs are the endpoints beyond chat and completions the worker
	// serves itself (APIMessages, APIResponses, APIEmbeddings); a request
	// to another is translated into a chat completion.
	APIs []string
	// Drift is what the worker's bridge could not index of its engine's
	// KV events, from its load report; nil for Switchyard's own workers.
	Drift *Drift
	// Draining: the worker is shutting down gracefully; it finishes what
	// it serves and gets nothing new.
	Draining bool
}

// Refusal is a worker that registered but may not serve (model or block size
// mismatch, ...), with the reason.
type Refusal struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Workers is the current view of the worker pool. Implementations must be
// safe for concurrent use; the slices returned are not modified by the
// frontend.
type Workers interface {
	List() []Worker
	Refused() []Refusal
}

// RouteRequest is what the router gets for one pick.
type RouteRequest struct {
	// RequestID is unique among the frontend's requests in flight. A
	// Router may book the request under it on the worker it picks (the
	// node's does; see InFlight).
	RequestID    string
	Hashes       []uint64 // block hashes of the prompt, chained from the cache_salt root
	PromptTokens int
	MaxTokens    int      // the most tokens it decodes on the chosen worker: max_tokens; 0 when unknown or none (a prefill worker)
	Candidates   []string // worker IDs the router may choose from; never empty
	// IndexSuspect are the candidates whose KV-event index the frontend
	// found inconsistent with what their engines serve from cache: route
	// them by the approximate index, as workers whose events are not
	// healthy. Nil when there are none.
	IndexSuspect []string
	// Adapter is the LoRA adapter the request names as its model; "" for
	// a base model. A Router may prefer workers that hold it.
	Adapter string
	// BlockSize is the block size of the candidates' model, which Hashes
	// are made of; 0 means the frontend's default.
	BlockSize int
	// Model is the candidates' model (their Model; "" when unknown), for
	// a Router with per-model settings.
	Model string
}

// Decision is the router's answer.
type Decision struct {
	WorkerID      string // one of the candidates
	OverlapBlocks int    // leading blocks of the prompt the index says the worker holds, in any tier
	Policy        string // the policy that decided, e.g. "kv"
	// TierBlocks splits OverlapBlocks by tier: GPU, CPU, disk. All zero
	// from a router that does not know tiers.
	TierBlocks [3]int
	// Approx says the overlap came from the router's own recent decisions,
	// not from KV events (the worker's events are not healthy).
	Approx bool
	// IndexBlocks is, when Approx, the overlap the KV-event index alone
	// showed on the worker: what the engine's cache report is checked
	// against. Unused otherwise (OverlapBlocks is the index's).
	IndexBlocks int
	// After, when set, is work the router left for once the request is on
	// its way (recording the decision for later picks): the frontend calls
	// it once, when the request is written to its worker or, failing
	// that, when the request is done.
	After func()
}

// Router picks workers and owns the routing policy.
type Router interface {
	Pick(ctx context.Context, req RouteRequest) (Decision, error)
	Policy() string
	Policies() []string
	// SetPolicy switches the policy; it returns an error for an unknown name.
	SetPolicy(name string) error
}

// InFlight is told about every request the frontend sends to a worker so
// the router sees load between the workers' own load reports. Calls for one
// request on one worker come in the order Started (maybe repeated, with
// updated blocks), FirstToken (at most once), Finished; a disaggregated
// request is in flight on its decode and its prefill worker at once.
//
// A Router may book a request on the worker it picks, from the pick on, so
// that concurrent picks see it. The frontend then takes every pick over
// with Started … Finished, or gives it back with Release: when the gate
// keeps the prefill local (the prefill pool's pick), when the gate names
// another prefill worker, and when the request fails or its client leaves
// before it reaches the worker. A Router that books needs an InFlight.
type InFlight interface {
	// Started: prefillBlocks are the prompt blocks the worker must compute;
	// promptBlocks are all the blocks the request holds on the worker once
	// it decodes (cached ones included), as the worker's own load reports
	// count them.
	Started(workerID, requestID string, prefillBlocks, promptBlocks int)
	FirstToken(workerID, requestID string)
	Finished(workerID, requestID string)
	// Release gives back a pick of workerID that the request never
	// reached; it does nothing for a request finished or unknown there.
	Release(workerID, requestID string)
}

// StoreWatcher is an ability an InFlight may have (the node's, to expect
// the worker's KV events; see kvevents.Consumer.ExpectEvents). Right after
// a forward's Started, the frontend tells it how many of the prompt's full
// blocks the index does not show on the worker: the blocks the request
// makes it store, whether it computes them or, as the decode worker of a
// remote prefill, receives them by KV transfer and stores them as its own.
// Started's prefillBlocks count only what it computes (0 for that decode
// worker), so they cannot tell.
type StoreWatcher interface {
	Stores(workerID, requestID string, newBlocks int)
}

// EventStatus is a worker's KV-event health.
type EventStatus struct {
	State        string        `json:"state"` // healthy, resyncing, silent, disabled
	Cause        string        `json:"cause,omitempty"`
	Epoch        uint64        `json:"epoch"`
	LastSeq      uint64        `json:"last_seq"`
	LastEventAge time.Duration `json:"-"`
	Batches      uint64        `json:"batches"`
	Blocks       uint64        `json:"blocks"`
	Gaps         uint64        `json:"gaps"`
	Resyncs      uint64        `json:"resyncs"`
	Malformed    uint64        `json:"malformed"`
	// ImplausibleEpoch counts batches ignored for an epoch the registry
	// does not vouch for; ResyncFailures, resyncs that did not end in
	// sync (each doubles the wait before the next, up to 30 s).
	ImplausibleEpoch uint64 `json:"implausible_epoch"`
	ResyncFailures   uint64 `json:"resync_failures"`
	// IndexedBlocks is what the prefix index holds for the worker, per KV
	// tier (gpu, cpu, disk); a block in two tiers counts in both.
	IndexedBlocks map[string]int `json:"indexed_blocks,omitempty"`
	// UnknownMedia counts events whose medium was unknown (indexed as the
	// slowest tier).
	UnknownMedia uint64 `json:"unknown_media"`
}

// MarshalJSON adds last_event_age_s in seconds.
func (e EventStatus) MarshalJSON() ([]byte, error) {
	type plain EventStatus
	return json.Marshal(struct {
		plain
		AgeSeconds float64 `json:"last_event_age_s"`
	}{plain(e), e.LastEventAge.Seconds()})
}

// StateHealthy is the only event state that does not degrade /health.
const StateHealthy = "healthy"

// EventHealth reports the KV-event health of workers.
type EventHealth interface {
	// EventStatus returns the worker's status, or false if the consumer does
	// not know the worker.
	EventStatus(workerID string) (EventStatus, bool)
}

// Index answers prefix lookups for /admin/lookup.
type Index interface {
	// Overlaps returns, for each worker holding at least one leading block,
	// how many leading blocks of hashes it holds.
	Overlaps(hashes []uint64) map[string]int
}

// GateInput describes one request to the disaggregation gate.
type GateInput struct {
	RequestID            string
	Mode                 string // the disaggregation mode in force: DisaggAlways or DisaggAuto
	PromptTokens         int
	Decode               string // the decode worker the router chose
	DecodeOverlapBlocks  int
	Prefill              string // the prefill worker the router chose
	PrefillOverlapBlocks int
}

// GateDecision is the gate's answer. Prefill, if not empty, overrides the
// prefill worker the frontend proposed.
type GateDecision struct {
	Remote          bool
	Reason          string
	PredictedLocal  time.Duration
	PredictedRemote time.Duration
	KVBytes         int64
	Prefill         string
}

// Observation is what the frontend measured for a gated request, sent after
// the request completes. TTFT is zero when not measured (a non-streaming
// answer); KVBytes and Transfer are what the decode worker reported pulling
// (headers x-kv-pulled-bytes and x-kv-pull-ms), zero when not known.
type Observation struct {
	RequestID string
	Remote    bool
	Predicted time.Duration // the prediction for the path taken
	TTFT      time.Duration // measured at the frontend, from request arrival
	From, To  string        // prefill and decode worker IDs (From is empty when local)
	KVBytes   int64         // KV bytes the decode worker received
	Transfer  time.Duration // how long the decode worker's pull took
}

// Gate decides where prefill runs.
type Gate interface {
	Decide(ctx context.Context, in GateInput) GateDecision
	Observe(o Observation)
}

// GateSettings are the disaggregation gate's tunables, for GET /admin/disagg.
type GateSettings struct {
	Margin  float64       // fraction by which remote must be predicted faster
	TTFTSLO time.Duration // time-to-first-token objective
	ITLSLO  time.Duration // inter-token latency objective
}

// GateInfo reports the gate's settings. Deps.GateInfo may provide it; if it
// is nil, a Gate that also has this method is used.
type GateInfo interface {
	Settings() GateSettings
}

// LinkStatus is the current estimate of one prefill → decode link.
type LinkStatus struct {
	BytesPerSec float64
	RTT         time.Duration
	Measured    bool   // false: no probe or transfer has been seen yet
	Samples     int    // probes and transfers the estimate is built from
	Emulated    string // e.g. "1 Gbit/s (emulated)"; empty for a real link
}

// Links reports link estimates between workers.
type Links interface {
	// Link returns the estimate of the from → to link, or false if the
	// link is not known at all.
	Link(from, to string) (LinkStatus, bool)
}

// ProbeResult is one measured transfer of a link probe.
type ProbeResult struct {
	Bytes       int64
	Duration    time.Duration
	BytesPerSec float64
	RTT         time.Duration
	Emulated    string // e.g. "1 Gbit/s (emulated)"; empty for a real link
}

// Prober measures a link by moving bytes from a prefill worker to a decode
// worker. It runs for as long as ctx allows.
type Prober interface {
	Probe(ctx context.Context, from, to Worker, bytes int64) (ProbeResult, error)
}

// PredictInput asks for the gate's prediction at several prompt lengths for
// one prefill → decode pair, with empty queues and nothing cached.
type PredictInput struct {
	PromptTokens []int
	Prefill      Worker
	Decode       Worker
}

// PromptPrediction is the prediction for one prompt length.
type PromptPrediction struct {
	PromptTokens int
	KVBytes      int64
	Transfer     time.Duration // 0 when the link is unmeasured
	LocalTTFT    time.Duration
	RemoteTTFT   time.Duration
	Choice       string // "local" or "remote"
	Reason       string
}

// Prediction is the answer of a Predictor: one entry per input length, in
// input order, and the link estimate used.
type Prediction struct {
	Predictions []PromptPrediction
	Link        LinkStatus
}

// Predictor runs the disaggregation math without a request. Deps.Predictor
// may provide it; if it is nil, a Gate that also has this method is used.
type Predictor interface {
	Predict(ctx context.Context, in PredictInput) (Prediction, error)
}

// BusStatus is the control-plane bus (NATS and the worker registry on it)
// as the frontend sees it.
type BusStatus struct {
	Down bool // the registry cannot be heard: routing uses the last known workers
	// State names how, for /health: "down" (disconnected), "stalled" (no
	// round trip answered) or "jetstream unavailable"; "" means "down".
	State string
	Since time.Time // when it went down
	Cause string
}

// BusHealth reports the bus state for /health.
type BusHealth interface {
	BusStatus() BusStatus
}

// Tokenizer turns prompts and chats into the token IDs the engine will
// compute: tokenizer.Model (cl100k or a model's tokenizer.json) fits.
type Tokenizer = tokenizer.Encoder

// ResponseSharer shares which worker stored a Responses API answer, so a
// peer frontend can send previous_response_id there too.
type ResponseSharer interface {
	StoredResponse(responseID, workerID string)
}

// Deps are the components the frontend consumes. Workers and Router are
// required; the rest are optional (nil disables what needs them).
type Deps struct {
	Workers   Workers
	Router    Router
	InFlight  InFlight
	Events    EventHealth
	Gate      Gate
	Index     Index
	Tokenizer Tokenizer // nil: the process-wide cl100k tokenizer
	// Responses, if set, is told of every response a worker stored, for
	// peer frontends (see Server.NoteStoredResponse).
	Responses ResponseSharer
	// ModelTokenizer, when set, gives a model's own tokenizer, by the
	// workers' Model; nil from it means Tokenizer.
	ModelTokenizer func(model string) Tokenizer
	Bus            BusHealth // nil: /health reports the bus as up

	Links     Links     // link estimates for /admin/links and /health; nil: every link unmeasured
	Prober    Prober    // runs POST /admin/links/probe; nil: 501
	GateInfo  GateInfo  // nil: Gate, if it implements GateInfo
	Predictor Predictor // runs POST /admin/disagg/predict; nil: Gate, if it implements Predictor
	Cluster   Cluster   // GET /admin/cluster; nil: the bus status is unknown
	// Peers reports the other frontend replicas' requests on each worker,
	// so MaxInflightPerWorker bounds the deployment's, not only this
	// replica's; nil: this frontend is alone.
	Peers PeerLoad
	// Queue predicts each worker's prefill queue, for Config.QueueTTFT;
	// nil: no worker counts as full by its queue.
	Queue QueueDelayer
}

// gateInfo returns the configured GateInfo, if any.
func (d *Deps) gateInfo() GateInfo {
	if d.GateInfo != nil {
		return d.GateInfo
	}
	gi, _ := d.Gate.(GateInfo)
	return gi
}

// predictor returns the configured Predictor, if any.
func (d *Deps) predictor() Predictor {
	if d.Predictor != nil {
		return d.Predictor
	}
	p, _ := d.Gate.(Predictor)
	return p
}

var errNoCandidates = errors.New("frontend: no candidate workers")

// QueueDelayer predicts how long a new prompt would wait behind the
// prefill queued on a worker; false when it cannot tell. Called as often
// as PeerLoad.
type QueueDelayer interface {
	QueueDelay(workerID string) (time.Duration, bool)
}

// PeerLoad reports the requests other frontend replicas have in flight
// on a worker. It must be safe for concurrent use and cheap: admission
// calls it for every worker on every arrival and release.
type PeerLoad interface {
	PeerInFlight(workerID string) int
}

// Cluster reports the bus connection and the frontend replicas this one
// shares routing state with, for GET /admin/cluster. The value is encoded
// as JSON as it is.
type Cluster interface {
	ClusterStatus() any
}
