package kvindex

// Tier is the storage medium of a cached block on one worker, fastest first.
// The zero value is TierGPU.
type Tier uint8

const (
	// TierGPU: device memory; a hit costs nothing to use.
	TierGPU Tier = iota
	// TierCPU: host memory; a hit is loaded over the host link.
	TierCPU
	// TierDisk: local storage; the slowest tier.
	TierDisk
	// NumTiers is the number of tiers.
	NumTiers = 3
)

// String returns the tier's name as vLLM spells the medium ("GPU", "CPU",
// "DISK").
func (t Tier) String() string {
	switch t {
	case TierGPU:
		return "GPU"
	case TierCPU:
		return "CPU"
	case TierDisk:
		return "DISK"
	}
	return "UNKNOWN"
}

// Valid reports whether t is one of the known tiers.
func (t Tier) Valid() bool { return t < NumTiers }

// bit is t's bit in an entry's tier mask; an invalid tier counts as the
// slowest one.
func (t Tier) bit() uint16 {
	if t >= NumTiers {
		t = TierDisk
	}
	return 1 << (tierShift + uint(t))
}

// tierOfBit is the tier of a single tier bit (as Tier.bit).
func tierOfBit(b uint16) Tier { return bestTier(b >> tierShift) }

// TierCounts counts blocks by tier.
type TierCounts [NumTiers]int32

// bestTier is the fastest tier in a lane's tier bits (lane >> tierShift,
// never 0 for a held block).
func bestTier(m uint16) Tier {
	switch {
	case m&1 != 0:
		return TierGPU
	case m&2 != 0:
		return TierCPU
	}
	return TierDisk
}
