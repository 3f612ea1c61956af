package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// EventPublisher receives the KV events of each scheduler step, in order,
// once per step that has any. It is called with the engine's lock held, so
// it must not block for long nor call back into the engine; the slice is
// the publisher's to keep.
type EventPublisher interface {
	PublishStep(events []kvevents.Event)
}

// PublisherFunc adapts a function to EventPublisher.
type PublisherFunc func(events []kvevents.Event)

// PublishStep calls f(events).
func (f PublisherFunc) PublishStep(events []kvevents.Event) { f(events) }

// Leaser keeps a prefill worker's pinned blocks available to a decode
// worker. Lease returns a token naming the lease; the leaser calls release
// exactly once, when the blocks have been pulled or the lease expires.
type Leaser interface {
	Lease(hashes []uint64, release func()) (token string, err error)
}

// Puller fetches blocks from a prefill worker. It calls insert, in chain
// order, with each block hash whose payload it received and verified; it
// returns an error if it could not fetch them all.
type Puller interface {
	Pull(ctx context.Context, params map[string]any, blockHashes []uint64, insert func(hash uint64) error) error
}

// Config configures a Worker. Zero fields take the defaults noted.
type Config struct {
	ID    string // worker id; default "sim-0"
	Role  string // bus.RoleAggregated (default), RolePrefill or RoleDecode
	Model string // perfmodel preset; default "qwen3-0.6b"
	// Tokenizer is the model's tokenizer (nil: cl100k with a ChatML
	// template): token counts, and so KV bytes, follow it.
	Tokenizer tokenizer.Model
	GPU       string // perfmodel preset; default "rtx-4060"
	TP        int    // tensor parallelism; default: the smallest that fits the weights

	BlockSize            int     // tokens per KV block; default 16
	KVBlocks             int     // KV blocks; default from GPU memory
	GPUMemoryUtilization float64 // share of GPU memory for weights + KV; default 0.9
	MaxNumBatchedTokens  int     // token budget per step; default 8192
	MaxNumSeqs           int     // running sequences at most; default 256
	Speedup              float64 // simulated seconds per wall second; default 1
	Seed                 int64   // mixed into generation for requests without a seed
	// KVOffloadGiB adds a host-memory tier of that many GiB: blocks evicted
	// from the GPU are written there, and a prompt whose prefix is there
	// loads it back over the GPU's host link. 0: no offloading.
	KVOffloadGiB float64
	// KVDiskGiB adds a disk tier below host memory (needs KVOffloadGiB).
	KVDiskGiB float64

	// ServedNames are the names the model is served under, as vLLM's
	// --served-model-name: the first is registered as the worker's model,
	// the rest as its aliases. Empty: Model.
	ServedNames []string
	// Adapters are the LoRA adapters served on top of the model (vLLM's
	// --lora-modules). A request names one as its model; its KV blocks
	// are cached apart from the base model's (kvindex.LoRASalt).
	Adapters []bus.Adapter
	// MaxLoRAs is how many adapters fit in GPU memory at once (vLLM's
	// --max-loras); default 1, as vLLM's.
	MaxLoRAs int
	// LoRASwap is the simulated time to load an adapter into a slot;
	// default 50 ms.
	LoRASwap time.Duration
	// AdaptersChanged, when set, is called with the adapters served after
	// POST /v1/load_lora_adapter or /v1/unload_lora_adapter changed them
	// (from the request's goroutine), so the registry entry can follow.
	AdaptersChanged func([]bus.Adapter)

	Publisher  EventPublisher // KV events; nil drops them
	Leaser     Leaser         // prefill role: pins blocks for remote decode
	Puller     Puller         // decode role: fetches remote prefills
	KVXferAddr string         // host:port of this worker's KV transfer server
	Logger     *slog.Logger   // default slog.Default()
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.ID == "" {
		c.ID = "sim-0"
	}
	if c.Role == "" {
		c.Role = bus.RoleAggregated
	}
	if c.Model == "" {
		c.Model = "qwen3-0.6b"
	}
	if c.GPU == "" {
		c.GPU = "rtx-4060"
	}
	def(&c.BlockSize, 16)
	def(&c.MaxLoRAs, 1)
	if c.LoRASwap == 0 {
		// A rank-16 adapter of a small model is tens of MB: tens of ms
		// from host memory over PCIe, as vLLM's LRU cache loads it.
		c.LoRASwap = 50 * time.Millisecond
	}
	def(&c.MaxNumBatchedTokens, 8192)
	def(&c.MaxNumSeqs, 256)
	if c.GPUMemoryUtilization == 0 {
		c.GPUMemoryUtilization = 0.9
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Check reports what NewWorker would refuse in c, without building a
// worker: bad values, unknown model or GPU presets, and weights that leave
// no room for a KV cache. Commands call it before starting anything.
func (c Config) Check() error {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	_, err := newCore(c, nil)
	return err
}

func (c Config) validate() error {
	var errs []error
	switch c.Role {
	case bus.RoleAggregated, bus.RolePrefill, bus.RoleDecode:
	default:
		errs = append(errs, fmt.Errorf("role %q is not aggregated, prefill or decode", c.Role))
	}
	if c.BlockSize < 1 || c.BlockSize > 1024 {
		errs = append(errs, fmt.Errorf("block size %d is outside 1..1024", c.BlockSize))
	}
	if c.KVBlocks < 0 {
		errs = append(errs, fmt.Errorf("kv blocks %d is negative", c.KVBlocks))
	}
	if c.GPUMemoryUtilization <= 0 || c.GPUMemoryUtilization > 1 {
		errs = append(errs, fmt.Errorf("gpu memory utilization %g is outside (0, 1]", c.GPUMemoryUtilization))
	}
	if c.MaxNumBatchedTokens < 1 {
		errs = append(errs, fmt.Errorf("max num batched tokens %d < 1", c.MaxNumBatchedTokens))
	}
	if c.MaxNumSeqs < 1 {
		errs = append(errs, fmt.Errorf("max num seqs %d < 1", c.MaxNumSeqs))
	}
	if c.KVOffloadGiB < 0 || c.KVDiskGiB < 0 {
		errs = append(errs, fmt.Errorf("kv offload %g GiB and kv disk %g GiB must not be negative", c.KVOffloadGiB, c.KVDiskGiB))
	}
	if c.KVDiskGiB > 0 && c.KVOffloadGiB == 0 {
		errs = append(errs, fmt.Errorf("a disk tier (%g GiB) needs a host-memory tier above it: set --kv-offload-gib too", c.KVDiskGiB))
	}
	names := map[string]bool{}
	for _, n := range c.ServedNames {
		if n == "" || names[n] {
			errs = append(errs, fmt.Errorf("served model name %q is empty or given twice", n))
		}
		names[n] = true
	}
	if len(c.ServedNames) == 0 {
		names[c.Model] = true
	}
	for _, a := range c.Adapters {
		if a.Name == "" || names[a.Name] {
			errs = append(errs, fmt.Errorf("lora adapter %q is empty, given twice or also a served model name", a.Name))
		}
		names[a.Name] = true
	}
	if c.MaxLoRAs < 1 || c.LoRASwap < 0 {
		errs = append(errs, fmt.Errorf("max loras %d must be at least 1 and lora swap %v not negative", c.MaxLoRAs, c.LoRASwap))
	}
	if c.Speedup <= 0 {
		errs = append(errs, fmt.Errorf("speedup %g must be positive", c.Speedup))
	}
	if c.TP < 0 || c.TP&(c.TP-1) != 0 || c.TP > 8 {
		errs = append(errs, fmt.Errorf("tp %d is not 1, 2, 4 or 8", c.TP))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim: config: %w", err)
	}
	return nil
}
