package preflight

import "time"

// Status is a check's verdict.
type Status string

// Verdicts, in increasing severity.
const (
	Pass Status = "PASS"
	// Skip is a check with nothing to examine on this deployment (links
	// and the disaggregation math without prefill workers): not a pass,
	// which would claim something was checked, and no failure either.
	Skip Status = "SKIP"
	Warn Status = "WARN"
	Fail Status = "FAIL"
)

func (s Status) rank() int {
	switch s {
	case Warn:
		return 1
	case Fail:
		return 2
	}
	return 0
}

// worst returns the more severe of a and b.
func worst(a, b Status) Status {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// SchemaVersion names the JSON report's schema (docs/preflight.schema.json).
const SchemaVersion = "switchyard-preflight/v1"

// Check names, in the order Run performs them.
const (
	CheckInventory = "inventory"
	CheckEvents    = "kv-events"
	CheckPrefix    = "prefix-cache"
	CheckRouting   = "routing"
	CheckLinks     = "links"
	CheckDisagg    = "disagg"
	CheckTokenizer = "tokenizer"
	CheckAgreement = "index-agreement"
)

// Report is the outcome of one preflight run. Durations are seconds unless a
// name says otherwise.
type Report struct {
	Schema     string     `json:"schema"`
	URL        string     `json:"url"`
	StartedAt  time.Time  `json:"started_at"`
	DurationS  float64    `json:"duration_s"`
	Verdict    Status     `json:"verdict"`
	Deployment Deployment `json:"deployment"`
	Checks     []Check    `json:"checks"`
}

// Failed reports whether any check failed; the command exits 1 when it did.
func (r *Report) Failed() bool { return r.Verdict == Fail }

// Deployment is GET /health as preflight read it.
type Deployment struct {
	Status    string    `json:"status"`
	Reason    string    `json:"reason,omitempty"`
	Model     string    `json:"model"`
	Models    []string  `json:"models,omitempty"` // a fleet's base models, from /health
	BlockSize int       `json:"block_size"`
	Policy    string    `json:"policy"`
	Disagg    string    `json:"disagg"`
	Workers   []Worker  `json:"workers"`
	Refused   []Refusal `json:"refused"`
}

// Worker is one worker of /health.
type Worker struct {
	ID              string       `json:"id"`
	Role            string       `json:"role"`
	Model           string       `json:"model"`
	BlockSize       int          `json:"block_size"`
	KVBytesPerToken int64        `json:"kv_bytes_per_token"`
	MaxModelLen     int          `json:"max_model_len,omitempty"` // 0 when /health does not say
	URL             string       `json:"url,omitempty"`
	Events          WorkerHealth `json:"events"`
}

// WorkerHealth is a worker's KV-event state as /health reports it.
type WorkerHealth struct {
	State string `json:"state"`
	Cause string `json:"cause,omitempty"`
}

// Refusal is a worker the frontend refused to register, and why.
type Refusal struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

// Worker roles.
const (
	RoleAggregated = "aggregated"
	RolePrefill    = "prefill"
	RoleDecode     = "decode"
)

// Check is one item of the checklist. Exactly one of the detail fields is
// set, matching Name (none when the check could not run at all).
type Check struct {
	Name     string   `json:"name"`
	Status   Status   `json:"status"`
	Summary  string   `json:"summary"`
	Problems []string `json:"problems"` // one line per FAIL or WARN cause, naming the worker or link
	Notes    []string `json:"notes"`    // context that is not a problem

	Inventory *Inventory       `json:"inventory,omitempty"`
	Events    []EventsProbe    `json:"events,omitempty"`
	Prefix    []PrefixProbe    `json:"prefix,omitempty"`
	Routing   *RoutingResult   `json:"routing,omitempty"`
	Links     []Link           `json:"links,omitempty"`
	Disagg    *DisaggResult    `json:"disagg,omitempty"`
	Tokenizer []TokenizerProbe `json:"tokenizer,omitempty"`
	Agreement []AgreementProbe `json:"agreement,omitempty"`
}

// AgreementProbe is the index-agreement check of one serving worker: its
// repeated-prefix chats on which the index or the engine claimed a cached
// prefix, what each side said, and how often they disagreed by a block or
// more.
type AgreementProbe struct {
	Worker          string `json:"worker"`
	Role            string `json:"role"`
	Status          Status `json:"status"`
	Requests        int    `json:"requests"`
	PredictedTokens int    `json:"predicted_tokens"`     // cached tokens the index predicted, summed
	CachedTokens    int    `json:"engine_cached_tokens"` // cached tokens the engine reported, summed
	Blind           int    `json:"blind"`                // the engine served a block or more the index did not predict
	Stale           int    `json:"stale"`                // the index predicted a block or more the engine did not serve
	// Unreported is the chats whose usage had no cached_tokens: not judged.
	Unreported int `json:"unreported"`
	// FrontendState is the frontend's own running judgement from /health:
	// consistent or inconsistent (with FrontendCause); empty when the
	// frontend does not judge agreement.
	FrontendState string `json:"frontend_state,omitempty"`
	FrontendCause string `json:"frontend_cause,omitempty"`
	Error         string `json:"error,omitempty"`
}

// Inventory counts the workers.
type Inventory struct {
	Workers    int            `json:"workers"`
	ByRole     map[string]int `json:"by_role"`
	ByModel    map[string]int `json:"by_model"`
	BlockSizes map[string]int `json:"block_sizes"` // block size (as a string key) → workers
	Refused    []Refusal      `json:"refused"`
}

// EventsProbe is the KV-event check of one worker.
type EventsProbe struct {
	Worker string `json:"worker"`
	Role   string `json:"role"`
	Status Status `json:"status"`
	// State and counters from /admin/events after the probe.
	State         string  `json:"state"`
	Cause         string  `json:"cause,omitempty"`
	Epoch         uint64  `json:"epoch"`
	LastSeq       uint64  `json:"last_seq"`
	LastEventAgeS float64 `json:"last_event_age_s"`
	GapsBefore    uint64  `json:"gaps_before"`
	GapsAfter     uint64  `json:"gaps_after"`
	// The probe: its full blocks, and when the index first showed all of
	// them on this worker (seconds after the response ended; null if never
	// within the deadline).
	ProbeTokens    int      `json:"probe_tokens"`
	ProbeBlocks    int      `json:"probe_blocks"`
	IndexedBlocks  int      `json:"indexed_blocks"`
	IndexedAfterS  *float64 `json:"indexed_after_s"`
	DeadlineS      float64  `json:"deadline_s"`
	ServedBy       string   `json:"served_by,omitempty"`
	ProbeErrorText string   `json:"probe_error,omitempty"`
}

// PrefixProbe is the same-prefix TTFT probe of one worker.
type PrefixProbe struct {
	Worker          string  `json:"worker"`
	Role            string  `json:"role"`
	Status          Status  `json:"status"`
	PromptTokens    int     `json:"prompt_tokens"`
	FullBlockTokens int     `json:"full_block_tokens"` // tokens in the prompt's full blocks: what warm must find cached
	ColdTTFTS       float64 `json:"cold_ttft_s"`
	WarmTTFTS       float64 `json:"warm_ttft_s"`
	WarmOverCold    float64 `json:"warm_over_cold"` // warm TTFT ÷ cold TTFT; below 1 is a speed-up
	ColdCached      int     `json:"cold_cached_tokens"`
	WarmCached      int     `json:"warm_cached_tokens"`
	Error           string  `json:"error,omitempty"`
}

// RoutingResult is the repeated-prefix workload through the router.
type RoutingResult struct {
	Policy            string         `json:"policy"`
	Prefixes          int            `json:"prefixes"`
	PrefixTokens      int            `json:"prefix_tokens"`
	SuffixTokens      int            `json:"suffix_tokens"`
	SharedBlockTokens int            `json:"shared_block_tokens"` // a hit caches at least this many tokens
	IndexedPrefixes   int            `json:"indexed_prefixes"`    // warm-ups the index showed before the measured requests
	Requests          int            `json:"requests"`
	OK                int            `json:"ok"`
	Hits              int            `json:"hits"`
	HitRatio          float64        `json:"hit_ratio"` // hits ÷ requests
	ExpectedHitRatio  float64        `json:"expected_hit_ratio"`
	MinHitRatio       float64        `json:"min_hit_ratio"`
	Workers           map[string]int `json:"workers"` // measured requests per serving worker
	MeanTTFTS         float64        `json:"mean_ttft_s"`
	// Tiers splits the hits by KV tier when workers report tiers.
	Tiers *RoutingTiers `json:"tiers,omitempty"`
}

// RoutingTiers is the routing check's cache hits by KV tier.
type RoutingTiers struct {
	// HitRatio is cached ÷ prompt tokens from each tier (gpu, cpu, disk).
	HitRatio map[string]float64 `json:"hit_ratio"`
	// LoadedBytes is the KV loaded from each lower tier (cpu, disk).
	LoadedBytes map[string]int64 `json:"loaded_bytes"`
	// MeanTTFTS is the mean TTFT of the requests whose hit's slowest tier
	// was the key (miss, gpu, cpu, disk).
	MeanTTFTS map[string]float64 `json:"mean_ttft_s_by_hit_tier"`
}

// Link is one prefill→decode pair's measured link.
type Link struct {
	From         string  `json:"from"`
	To           string  `json:"to"`
	Status       Status  `json:"status"`
	ProbeBytes   int64   `json:"probe_bytes"`
	ProbeSeconds float64 `json:"probe_s"`
	BytesPerSec  float64 `json:"bytes_per_sec"`
	MBPerSec     float64 `json:"mb_per_s"` // 10^6 bytes per second
	RTTMs        float64 `json:"rtt_ms"`
	Class        string  `json:"class"`    // the link class the throughput implies
	Emulated     string  `json:"emulated"` // the frontend's emulation label; "" for a real link
	Error        string  `json:"error,omitempty"`
}

// DisaggResult is the disaggregation math on this deployment's numbers.
type DisaggResult struct {
	Mode        string       `json:"mode"`
	Margin      float64      `json:"margin"`
	TTFTSLOMs   float64      `json:"ttft_slo_ms"`
	ITLSLOMs    float64      `json:"itl_slo_ms"`
	Pairs       []DisaggPair `json:"pairs"`
	Recommended string       `json:"recommended"` // never, auto or always
}

// DisaggPair is the math for one prefill→decode pair.
type DisaggPair struct {
	Prefill         string       `json:"prefill"`
	Decode          string       `json:"decode"`
	LinkBytesPerSec float64      `json:"link_bytes_per_sec"`
	LinkRTTMs       float64      `json:"link_rtt_ms"`
	Predictions     []Prediction `json:"predictions"`
	// BreakEvenTokens is the shortest prompt for which remote prefill pays,
	// found by doubling then bisection up to SearchMaxTokens; null when it
	// never pays on this link.
	BreakEvenTokens *int   `json:"break_even_tokens"`
	SearchMaxTokens int    `json:"search_max_tokens"`
	BreakEven       string `json:"break_even"` // human form: "from 5,120 tokens" or "never on this link"
	Recommended     string `json:"recommended"`
}

// Prediction is the gate's prediction for one prompt length at zero queue.
type Prediction struct {
	PromptTokens int     `json:"prompt_tokens"`
	KVBytes      int64   `json:"kv_bytes"`
	TransferS    float64 `json:"transfer_s"`
	LocalTTFTS   float64 `json:"local_ttft_s"`
	RemoteTTFTS  float64 `json:"remote_ttft_s"`
	Choice       string  `json:"choice"`
	Reason       string  `json:"reason"`
	RemotePays   bool    `json:"remote_pays"` // remote < (1 − margin) × local
}
