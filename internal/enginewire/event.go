package enginewire

// Kind is the type of an engine event.
type Kind uint8

const (
	// BlockStored: full blocks were added to the engine's prefix cache.
	BlockStored Kind = 1
	// BlockRemoved: blocks were evicted.
	BlockRemoved Kind = 2
	// AllBlocksCleared: the engine dropped every cached block.
	AllBlocksCleared Kind = 3
)

func (k Kind) String() string {
	switch k {
	case BlockStored:
		return "BlockStored"
	case BlockRemoved:
		return "BlockRemoved"
	case AllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Medium is where the engine holds a block. The values map one to one onto
// Switchyard's KV tiers, fastest first.
type Medium uint8

const (
	// MediumGPU is device memory; an absent or nil medium means GPU.
	MediumGPU Medium = iota
	// MediumCPU is host memory (SGLang's CPU_PINNED too).
	MediumCPU
	// MediumDisk is local disk or remote storage.
	MediumDisk
	// MediumUnknown is a medium name this decoder does not know. Users
	// count it and treat it as the slowest tier, never as GPU.
	MediumUnknown
)

func (m Medium) String() string {
	switch m {
	case MediumGPU:
		return "GPU"
	case MediumCPU:
		return "CPU"
	case MediumDisk:
		return "DISK"
	}
	return "unknown"
}

// ParseMedium maps an engine's medium name to a Medium.
func ParseMedium(name []byte) Medium {
	switch string(name) {
	case "GPU", "gpu", "cuda":
		return MediumGPU
	case "CPU", "cpu", "CPU_PINNED", "cpu_pinned":
		return MediumCPU
	case "DISK", "disk":
		return MediumDisk
	}
	return MediumUnknown
}

// Skip says why an event is not about the prefix cache a router matches.
type Skip uint8

const (
	// SkipNone: the event applies.
	SkipNone Skip = iota
	// SkipGroup: the event is for a KV cache group other than 0.
	SkipGroup
	// SkipSpec: the event's kv_cache_spec_kind is not full_attention.
	SkipSpec
)

func (s Skip) String() string {
	switch s {
	case SkipGroup:
		return "group_idx != 0"
	case SkipSpec:
		return "not full_attention"
	}
	return ""
}

// Event is one decoded engine event. Slices alias the Batch's reused storage
// and RawExtraKeys aliases the payload: all are valid until the next decode
// into the same Batch.
type Event struct {
	Kind Kind
	// BlockHashes are the engine's own hashes (BlockStored, BlockRemoved).
	BlockHashes []uint64
	// Parent is the engine hash of the block before BlockHashes[0];
	// HasParent is false for a request's first block.
	Parent    uint64
	HasParent bool
	// TokenIDs holds the tokens of the stored blocks, block after block.
	TokenIDs  []uint32
	BlockSize int
	// Medium is GPU when the event names none; MediumName keeps the name
	// when Medium is MediumUnknown.
	Medium     Medium
	MediumName string
	// LoraID and LoraName name the LoRA adapter whose blocks these are;
	// 0 and "" for the base model.
	LoraID   int64
	LoraName string
	// CacheSalt is SGLang's cache_salt field when sent as a map key; vLLM
	// carries the salt inside RawExtraKeys instead (see ExtraKeys).
	CacheSalt string
	// RawExtraKeys is the msgpack encoding of extra_keys (one entry per
	// block, nil or an array), or nil when absent.
	RawExtraKeys []byte
	GroupIdx     int
	// Skip is set when the event is outside the full-attention group.
	Skip Skip
}

// Batch is one decoded KVEventBatch.
type Batch struct {
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank (data_parallel_rank or attn_dp_rank);
	// HasDPRank is false when the batch omits it.
	DPRank    int
	HasDPRank bool
}
