package kvevents

import (
	"strings"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// Tier is the medium an event's blocks are stored in or removed from: the
// index's tier, so the consumer hands it over unchanged. The zero value is
// TierGPU, which is also what an event without a medium means (vLLM before
// CPU offloading sent none).
type Tier = kvindex.Tier

// The tiers, fastest first.
const (
	TierGPU  = kvindex.TierGPU
	TierCPU  = kvindex.TierCPU
	TierDisk = kvindex.TierDisk
	// NumTiers is the number of tiers.
	NumTiers = kvindex.NumTiers
)

// ParseMedium maps a medium name, as vLLM's BlockStored and BlockRemoved
// spell it ("GPU", "CPU"; "DISK" for a disk tier), case-insensitively, to a
// Tier. An empty name is the GPU: engines without offloading send none. Any
// other name returns TierDisk and false: the caller counts it, and the block
// is priced as the slowest known tier, never as a free GPU hit.
func ParseMedium(s string) (Tier, bool) {
	switch {
	case s == "", strings.EqualFold(s, "GPU"), strings.EqualFold(s, "CUDA"):
		return TierGPU, true
	case strings.EqualFold(s, "CPU"):
		return TierCPU, true
	case strings.EqualFold(s, "DISK"):
		return TierDisk, true
	}
	return TierDisk, false
}

// parseMediumBytes is ParseMedium without converting b to a string (the
// compiler elides the conversion in the comparisons), for the decoder.
func parseMediumBytes(b []byte) (Tier, bool) {
	switch string(b) {
	case "GPU":
		return TierGPU, true
	case "CPU":
		return TierCPU, true
	case "DISK":
		return TierDisk, true
	}
	return ParseMedium(string(b))
}
