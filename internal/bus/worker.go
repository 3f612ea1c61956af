package bus

import "slices"

// Roles a worker can take.
const (
	RoleAggregated = "aggregated"
	RolePrefill    = "prefill"
	RoleDecode     = "decode"
)

// Profile is a worker's timing profile: the roofline parameters the
// disaggregation gate needs to predict its prefill time without asking it.
// Times are in simulated seconds; Speedup says how much faster than wall time
// the worker runs them.
type Profile struct {
	Model           string  `json:"model"`
	GPU             string  `json:"gpu"`
	TP              int     `json:"tp"`
	PeakFLOPS       float64 `json:"peak_flops"`        // per GPU, dense bf16
	MemBandwidth    float64 `json:"mem_bandwidth_bps"` // per GPU, bytes/s
	MFU             float64 `json:"mfu"`
	MBU             float64 `json:"mbu"`
	StepOverheadSec float64 `json:"step_overhead_s"`
	ParamCount      float64 `json:"param_count"`
	WeightBytes     float64 `json:"weight_bytes"`
	Layers          int     `json:"layers"`
	Hidden          int     `json:"hidden"`
	AttnDim         int     `json:"attn_dim"`           // query heads × head dim; attention FLOPs scale with it
	KVBytesPerToken int     `json:"kv_bytes_per_token"` // over all TP ranks
	MaxBatchTokens  int     `json:"max_num_batched_tokens"`
	Speedup         float64 `json:"speedup"`
	// HostLinkBandwidth is one GPU's effective host↔device copy rate,
	// bytes/s each way; 0 if unknown.
	HostLinkBandwidth float64 `json:"host_link_bps,omitempty"`
	// DiskBandwidth is the disk tier's read rate, bytes/s; 0 without one.
	DiskBandwidth float64 `json:"disk_bps,omitempty"`
	// CPUBlocks and DiskBlocks are the lower tiers' capacities in blocks;
	// 0 without the tier.
	CPUBlocks  int `json:"kv_cpu_blocks,omitempty"`
	DiskBlocks int `json:"kv_disk_blocks,omitempty"`
}

// WorkerInfo is a worker's entry in the registry: everything the frontend
// needs to route to it, index its events and gate disaggregation on it.
type WorkerInfo struct {
	ID         string `json:"id"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	HTTPURL    string `json:"http_url"`
	KVXferAddr string `json:"kvxfer_addr,omitempty"`
	// ProbeURL is where POST /kvxfer/probe is served when not at HTTPURL:
	// a bridge's own listener in front of a real engine. "" means HTTPURL.
	ProbeURL         string  `json:"probe_url,omitempty"`
	BlockSize        int     `json:"block_size"`
	KVBytesPerToken  int     `json:"kv_bytes_per_token"`
	KVBlocks         int     `json:"kv_blocks"`
	KVEventsEnabled  bool    `json:"kv_events_enabled"`
	Epoch            uint64  `json:"epoch"`
	MaxModelLen      int     `json:"max_model_len"`
	Profile          Profile `json:"profile"`
	StartedUnixMilli int64   `json:"started_unix_ms"`
	// APIs are the endpoints beyond chat and completions the worker
	// serves itself: "messages" (POST /v1/messages), "responses" (POST
	// /v1/responses), "embeddings" (POST /v1/embeddings). The frontend
	// translates the first two into chat completions for a worker without
	// them.
	APIs []string `json:"apis,omitempty"`
	// Draining: the worker is shutting down gracefully. Frontends route
	// nothing new to it; it finishes what it serves, then deregisters.
	Draining bool `json:"draining,omitempty"`
	// Aliases are the other names Model is served under (an engine's
	// --served-model-name); a request for one goes to Model's pool.
	Aliases []string `json:"aliases,omitempty"`
	// Adapters are the LoRA adapters the worker serves on top of Model.
	// Their KV blocks are cached apart from Model's (see kvindex.LoRASalt).
	Adapters []Adapter `json:"adapters,omitempty"`
}

// Adapter is a LoRA adapter a worker serves, as its engine lists it in
// /v1/models: a model of its own whose parent is the worker's Model.
type Adapter struct {
	Name string `json:"name"`
	Root string `json:"root,omitempty"` // where the engine loaded it from
}

// ServesBase reports whether name is w's model or one of its aliases.
func (w *WorkerInfo) ServesBase(name string) bool {
	return name == w.Model || slices.Contains(w.Aliases, name)
}
