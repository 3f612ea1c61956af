// Package perfmodel is the roofline timing model of the simulated engine: model
// and GPU presets, the time of one scheduler step, and the prefill-time
// prediction the disaggregation gate uses. It works on bus.Profile, so a
// frontend can predict a worker's prefill time from its registry entry
// without importing the engine.
//
// A step costs max(compute, memory) + overhead, where compute is the step's
// FLOPs (2 × params per token plus attention, which is quadratic in context)
// over TP × peak × MFU, and memory is the weights plus the KV read over
// TP × bandwidth × MBU. The efficiencies and overheads of the A100 and H100
// were fitted to the splitwise measurements (see calibration.go); the other
// GPUs borrow them, as each comment says.
//
// Everything here is a pure function of its arguments and safe for
// concurrent use.
package perfmodel

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// Model describes one transformer's shape. Only what the roofline and the KV
// cache need is kept.
type Model struct {
	Name    string
	Layers  int
	Hidden  int
	QHeads  int
	KVHeads int
	HeadDim int
	Params  float64 // total parameters, embeddings included: what the weights weigh
	// DenseParams excludes the embedding and LM-head matrices: only these
	// cost 2 FLOPs per token per parameter (the embedding is a lookup, and
	// the LM head runs on one token per sequence, which we neglect).
	DenseParams float64
	BytesPerEl  int // 2 for bf16/fp16 weights and KV
	MaxModelLen int
}

// KVBytesPerToken is 2 (K and V) × layers × KV heads × head dim × bytes.
func (m Model) KVBytesPerToken() int { return 2 * m.Layers * m.KVHeads * m.HeadDim * m.BytesPerEl }

// AttnDim is the width of the attention projections (query heads × head dim),
// which is not always the hidden size (Qwen3-0.6B: 2048 against 1024).
func (m Model) AttnDim() int { return m.QHeads * m.HeadDim }

// WeightBytes is the size of the weights over all TP ranks.
func (m Model) WeightBytes() float64 { return m.Params * float64(m.BytesPerEl) }

// GPU describes one accelerator and the efficiencies the model applies to it.
type GPU struct {
	Name         string
	PeakFLOPS    float64 // dense bf16, per GPU
	MemBandwidth float64 // bytes/s, per GPU
	MemoryBytes  float64
	MFU          float64 // fraction of PeakFLOPS a step achieves
	MBU          float64 // fraction of MemBandwidth a step achieves
	StepOverhead time.Duration
	// RankOverhead is added per TP rank beyond the first: the collective
	// communication and launch cost that makes TP 8 slower than a pure
	// roofline predicts.
	RankOverhead time.Duration
	// HostLinkBandwidth is the effective host↔device copy rate of one GPU,
	// bytes/s each way: what offloaded KV blocks are written and loaded
	// back at.
	HostLinkBandwidth float64
}

// Model presets. Shapes are from the models' published configs.
var models = map[string]Model{
	"qwen3-0.6b":    {Name: "qwen3-0.6b", Layers: 28, Hidden: 1024, QHeads: 16, KVHeads: 8, HeadDim: 128, Params: 0.596e9, DenseParams: 0.44e9, BytesPerEl: 2, MaxModelLen: 40960},
	"llama-3.1-8b":  {Name: "llama-3.1-8b", Layers: 32, Hidden: 4096, QHeads: 32, KVHeads: 8, HeadDim: 128, Params: 8.03e9, DenseParams: 6.98e9, BytesPerEl: 2, MaxModelLen: 131072},
	"qwen3-32b":     {Name: "qwen3-32b", Layers: 64, Hidden: 5120, QHeads: 64, KVHeads: 8, HeadDim: 128, Params: 32.8e9, DenseParams: 31.2e9, BytesPerEl: 2, MaxModelLen: 40960},
	"llama-3.1-70b": {Name: "llama-3.1-70b", Layers: 80, Hidden: 8192, QHeads: 64, KVHeads: 8, HeadDim: 128, Params: 70.6e9, DenseParams: 68.5e9, BytesPerEl: 2, MaxModelLen: 131072},
	// The calibration model: the splitwise measurements are of llama2-70b fp16.
	"llama-2-70b": {Name: "llama-2-70b", Layers: 80, Hidden: 8192, QHeads: 64, KVHeads: 8, HeadDim: 128, Params: 69e9, DenseParams: 68.5e9, BytesPerEl: 2, MaxModelLen: 4096},
}

// Fitted efficiencies. The A100 and H100 values come from a grid search
// (MFU and MBU in steps of 0.02-0.03, overheads in 1-2 ms steps) that
// minimised, over the TP 2/4/8 groups, the worst median absolute percentage
// error of prompt_time and token_time against the llama2-70b rows of
// shared/data/traces/splitwise_sim_perf_model.csv (all prompt and batch
// sizes; the power-capped H100 rows are left out). The worst group came out
// at 9.8% (A100) and 14.4% (H100). TestCalibration re-checks the fit and
// WriteCalibrationTable prints it.
var (
	a100Fit = GPU{MFU: 0.54, MBU: 0.60, StepOverhead: 0, RankOverhead: 5 * time.Millisecond}
	h100Fit = GPU{MFU: 0.42, MBU: 0.84, StepOverhead: 8 * time.Millisecond, RankOverhead: 3 * time.Millisecond}
	// No measurements exist here for the L4 or the RTX 4060. They get a round
	// MFU of 0.6 (the A100 reached 0.54 at 70B, where TP communication eats
	// into it; one GPU has none), an MBU of 0.8 (between the fits) and a
	// 3 ms per-step overhead for kernel launches and scheduling. A 3,000-token
	// Qwen3-0.6B prefill then takes ~210 ms on an RTX 4060.
	smallFit = GPU{MFU: 0.60, MBU: 0.80, StepOverhead: 3 * time.Millisecond, RankOverhead: 5 * time.Millisecond}
)

// Host-link rates, effective, per direction. PCI-SIG line rates: Gen4 16
// GT/s and Gen5 32 GT/s per lane with 128b/130b coding, so x16 carries 31.5
// and 63 GB/s; pinned-memory cudaMemcpy (NVIDIA's bandwidthTest) commonly
// reports about 80% of that after packet overhead: ~25 GB/s on Gen4 x16,
// ~50 GB/s on Gen5 x16. Which generation each card has is from the data
// sheets: A100 and L4 are Gen4 x16, H100 SXM and H200 Gen5 x16, and the
// RTX 4060 Gen4 with only 8 lanes.
const (
	pcieGen4x8  = 12.5e9
	pcieGen4x16 = 25e9
	pcieGen5x16 = 50e9
)

// GPU presets: peak dense bf16 FLOPS, memory bandwidth and capacity from the
// vendors' data sheets (ARCHITECTURE.md), host link as above.
var gpus = map[string]GPU{
	"rtx-4060": withFit(GPU{Name: "rtx-4060", PeakFLOPS: 30e12, MemBandwidth: 272e9, MemoryBytes: 8e9, HostLinkBandwidth: pcieGen4x8}, smallFit),
	"l4":       withFit(GPU{Name: "l4", PeakFLOPS: 121e12, MemBandwidth: 300e9, MemoryBytes: 24e9, HostLinkBandwidth: pcieGen4x16}, smallFit),
	"a100-80g": withFit(GPU{Name: "a100-80g", PeakFLOPS: 312e12, MemBandwidth: 2039e9, MemoryBytes: 80e9, HostLinkBandwidth: pcieGen4x16}, a100Fit),
	"h100":     withFit(GPU{Name: "h100", PeakFLOPS: 989e12, MemBandwidth: 3350e9, MemoryBytes: 80e9, HostLinkBandwidth: pcieGen5x16}, h100Fit),
	// The H200 is an H100 die with more and faster HBM; it borrows the H100 fit.
	"h200": withFit(GPU{Name: "h200", PeakFLOPS: 989e12, MemBandwidth: 4800e9, MemoryBytes: 141e9, HostLinkBandwidth: pcieGen5x16}, h100Fit),
}

// DiskBandwidth is the read rate of the simulated disk tier, bytes/s: a
// local NVMe Gen4 x4 SSD, whose data sheets give ~7 GB/s sequential reads;
// 5 GB/s leaves room for the filesystem and the bounce through host memory.
const DiskBandwidth = 5e9

func withFit(g, fit GPU) GPU {
	g.MFU, g.MBU, g.StepOverhead, g.RankOverhead = fit.MFU, fit.MBU, fit.StepOverhead, fit.RankOverhead
	return g
}

// LookupModel returns the preset of that name.
func LookupModel(name string) (Model, error) {
	m, ok := models[name]
	if !ok {
		return Model{}, fmt.Errorf("perfmodel: unknown model %q (known: %v)", name, ModelNames())
	}
	return m, nil
}

// LookupGPU returns the preset of that name.
func LookupGPU(name string) (GPU, error) {
	g, ok := gpus[name]
	if !ok {
		return GPU{}, fmt.Errorf("perfmodel: unknown gpu %q (known: %v)", name, GPUNames())
	}
	return g, nil
}

// ModelNames lists the model presets, sorted.
func ModelNames() []string { return sortedKeys(models) }

// GPUNames lists the GPU presets, sorted.
func GPUNames() []string { return sortedKeys(gpus) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// weightHeadroom is the share of usable GPU memory the weights may take when
// DefaultTP picks a degree: the rest must hold a useful KV cache.
const weightHeadroom = 0.8

// DefaultTP returns the smallest TP degree in 1, 2, 4, 8 at which the weights
// take at most 80% of the usable memory of each GPU.
func DefaultTP(m Model, g GPU, memUtil float64) (int, error) {
	for tp := 1; tp <= 8; tp *= 2 {
		if m.WeightBytes()/float64(tp) <= weightHeadroom*memUtil*g.MemoryBytes {
			return tp, nil
		}
	}
	return 0, fmt.Errorf("perfmodel: %s (%.1f GB of weights) does not fit on 8 × %s", m.Name, m.WeightBytes()/1e9, g.Name)
}

// KVCapacityBytes is the memory left for the KV cache over all TP ranks:
// tp × memory × utilisation minus the weights. It is negative when the
// weights do not fit.
func KVCapacityBytes(m Model, g GPU, tp int, memUtil float64) float64 {
	return float64(tp)*g.MemoryBytes*memUtil - m.WeightBytes()
}

// NewProfile builds the profile of a worker running m on tp × g.
func NewProfile(m Model, g GPU, tp int) bus.Profile {
	return bus.Profile{
		Model:             m.Name,
		GPU:               g.Name,
		TP:                tp,
		PeakFLOPS:         g.PeakFLOPS,
		MemBandwidth:      g.MemBandwidth,
		MFU:               g.MFU,
		MBU:               g.MBU,
		StepOverheadSec:   (g.StepOverhead + time.Duration(tp-1)*g.RankOverhead).Seconds(),
		ParamCount:        m.DenseParams,
		WeightBytes:       m.WeightBytes(),
		Layers:            m.Layers,
		Hidden:            m.Hidden,
		AttnDim:           m.AttnDim(),
		KVBytesPerToken:   m.KVBytesPerToken(),
		Speedup:           1,
		HostLinkBandwidth: g.HostLinkBandwidth,
	}
}

// Tier numbers for LoadSeconds, as kvindex.Tier counts them.
const (
	TierCPU  = 1
	TierDisk = 2
)

// TierBandwidth is the rate, bytes/s over all TP ranks, at which blocks in
// tier (TierCPU or TierDisk) load into GPU memory: every rank has its own
// host link; the disk tier is bounded by the disk too. 0 when the profile
// states no host link, or for any other tier.
func TierBandwidth(p *bus.Profile, tier int) float64 {
	link := p.HostLinkBandwidth * float64(max(p.TP, 1))
	switch tier {
	case TierCPU:
		return link
	case TierDisk:
		if p.DiskBandwidth > 0 {
			return min(link, p.DiskBandwidth)
		}
	}
	return 0
}

// LoadTime is the simulated time to load tokens worth of KV from tier into
// GPU memory at TierBandwidth; it is "forever" (the largest Duration) when
// the tier has no bandwidth.
func LoadTime(p *bus.Profile, tier, tokens int) time.Duration {
	if tokens <= 0 {
		return 0
	}
	bw := TierBandwidth(p, tier)
	if bw <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(float64(tokens) * float64(p.KVBytesPerToken) / bw * float64(time.Second))
}

// Work is what one scheduler step computes, summed over its sequences.
// The zero value is an empty step, which still costs the weights' read and
// the overhead.
type Work struct {
	// Tokens is the number of tokens whose forward pass runs: prefill chunk
	// lengths plus one per decoding sequence.
	Tokens int
	// AttnPairs counts (query, key) pairs attended: for a sequence computing
	// q new tokens after c already in cache, q·c + q(q+1)/2.
	AttnPairs float64
	// KVReadTokens is the number of cached tokens whose K and V are read:
	// for each sequence its context before the step.
	KVReadTokens int
}

// Add accumulates one sequence computing q new tokens after c cached ones.
func (w *Work) Add(q, c int) {
	w.Tokens += q
	w.AttnPairs += float64(q)*float64(c) + float64(q)*float64(q+1)/2
	w.KVReadTokens += c + q
}

// StepSeconds returns the simulated duration of one step, in seconds.
func StepSeconds(p *bus.Profile, w Work) float64 {
	tp := float64(max(p.TP, 1))
	flops := 2*p.ParamCount*float64(w.Tokens) + 4*float64(p.Layers)*float64(p.AttnDim)*w.AttnPairs
	compute := flops / (tp * p.PeakFLOPS * p.MFU)
	bytes := p.WeightBytes + float64(w.KVReadTokens)*float64(p.KVBytesPerToken)
	memory := bytes / (tp * p.MemBandwidth * p.MBU)
	return max(compute, memory) + p.StepOverheadSec
}

// StepTime is StepSeconds as a Duration.
func StepTime(p *bus.Profile, w Work) time.Duration {
	return time.Duration(StepSeconds(p, w) * float64(time.Second))
}

// PrefillTime predicts the simulated time to prefill newTokens after
// cachedTokens already in cache, run alone in chunks of at most
// p.MaxBatchTokens (no chunking when it is 0). It excludes queueing.
func PrefillTime(p *bus.Profile, newTokens, cachedTokens int) time.Duration {
	if newTokens <= 0 {
		return 0
	}
	chunk := p.MaxBatchTokens
	if chunk <= 0 {
		chunk = newTokens
	}
	var s float64
	for done := 0; done < newTokens; done += chunk {
		q := min(chunk, newTokens-done)
		var w Work
		w.Add(q, cachedTokens+done)
		s += StepSeconds(p, w)
	}
	return time.Duration(s * float64(time.Second))
}

// LowerTierSaving prices a lower-tier hit: for a prompt of prompt tokens
// whose first gpu tokens are in GPU memory and whose next cpu and disk
// tokens are in those tiers, recompute is the prefill time those lower-tier
// tokens would take (the prompt's prefill with gpu tokens cached, minus its
// prefill with all of them cached) and load the time to load them instead.
// Loading is worth it only when load < recompute; the saving is then
// recompute − load.
func LowerTierSaving(p *bus.Profile, prompt, gpu, cpu, disk int) (recompute, load time.Duration) {
	n := cpu + disk
	if n <= 0 {
		return 0, 0
	}
	recompute = PrefillTime(p, prompt-gpu, gpu) - PrefillTime(p, prompt-gpu-n, gpu+n)
	if cpu > 0 {
		load = LoadTime(p, TierCPU, cpu)
	}
	if disk > 0 {
		load = satAdd(load, LoadTime(p, TierDisk, disk))
	}
	return recompute, load
}

func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
