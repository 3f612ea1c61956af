package kvindex

import (
	"encoding/binary"
	"strings"
)

// BlockHash identifies a full block of tokens together with every block
// before it in the same prompt: equal hashes mean equal prefixes.
type BlockHash = uint64

// rootSeed is the parent of the first block when a request has no
// cache_salt. Dynamo seeds XXH3 with 1337; we keep the number for
// familiarity, though the hash function differs.
const rootSeed uint64 = 1337

// Root returns the parent hash of a prompt's first block. An empty salt gives
// the shared root; any other salt gives a root of its own, so requests with
// different salts never share blocks.
func Root(salt string) BlockHash {
	if salt == "" {
		return rootSeed
	}
	// FNV-1a over the salt, then mixed: different salts land on unrelated roots.
	h := uint64(14695981039346656037)
	for i := 0; i < len(salt); i++ {
		h ^= uint64(salt[i])
		h *= 1099511628211
	}
	return Mix(h ^ 0x5a17)
}

// LoRASalt is the salt that roots a LoRA adapter's blocks, cache_salt
// (which may be empty) included: an engine keys an adapter's blocks by its
// name, so the same prompt on another adapter, or on the base model, is
// another cache.
func LoRASalt(adapter, salt string) string { return "lora\x00" + adapter + "\x00" + salt }

// SplitLoRASalt undoes LoRASalt: ok is false for a salt LoRASalt did not
// make.
func SplitLoRASalt(s string) (adapter, salt string, ok bool) {
	rest, ok := strings.CutPrefix(s, "lora\x00")
	if !ok {
		return "", "", false
	}
	adapter, salt, ok = strings.Cut(rest, "\x00")
	return adapter, salt, ok
}

// HashBlock returns the hash of one full block given its parent's hash.
// It is a multiply-xorshift hash over the token IDs, two tokens a round; it
// is not cryptographic, but collisions between distinct chains are 2^-64
// events, as for Dynamo's XXH3-64.
func HashBlock(parent BlockHash, tokens []uint32) BlockHash {
	h := parent*0x9E3779B97F4A7C15 ^ uint64(len(tokens))
	i := 0
	for ; i+1 < len(tokens); i += 2 {
		v := uint64(tokens[i]) | uint64(tokens[i+1])<<32
		h = (h ^ Mix(v)) * 0xbf58476d1ce4e5b9
		h ^= h >> 29
	}
	if i < len(tokens) {
		h = (h ^ Mix(uint64(tokens[i])|1<<63)) * 0xbf58476d1ce4e5b9
	}
	return Mix(h)
}

// HashChain appends to dst the hashes of every full block of tokens, chained
// from Root(salt). The partial last block is never hashed.
func HashChain(dst []BlockHash, salt string, tokens []uint32, blockSize int) []BlockHash {
	parent := Root(salt)
	for off := 0; off+blockSize <= len(tokens); off += blockSize {
		parent = HashBlock(parent, tokens[off:off+blockSize])
		dst = append(dst, parent)
	}
	return dst
}

// Mix is the splitmix64 finaliser: it scatters values that differ little.
// Block hashes are built on it; the router's tie rank, the simulator's
// ticker phases and the bridge's hash table use it too.
func Mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// PutHash writes h little-endian into b[:8]; a helper for wire formats.
func PutHash(b []byte, h BlockHash) { binary.LittleEndian.PutUint64(b, h) }
