package bench

import (
	"fmt"
	"math"
)

// prefixOverCapacity is how much KV the routing scenario's prefixes need
// together, as a multiple of the smallest serving worker's cache: more than
// one worker holds, so a policy that spreads a prefix's requests over
// workers pays misses and evictions, yet at most three quarters of what two
// workers hold, so a KV-aware policy can keep every prefix on one worker
// with room for the suffixes and outputs.
const prefixOverCapacity = 1.5

// maxAutoPrefixes bounds the sized prefix set: past it a run's warm-up
// alone would take minutes.
const maxAutoPrefixes = 400

// tokensPerWord is cl100k's rough rate on English prose, to size
// --prefix-words prefixes before they are built.
const tokensPerWord = 1.3

// SizePrefixes compares the routing scenario's prefix set with the KV
// capacity /health reports for each serving worker, sets cfg.PrefixSizing
// to say how, and, when cfg.AutoPrefixes, sets cfg.Prefixes (and the
// default one-per-prefix warm-up) so that the prefixes need
// prefixOverCapacity × the smallest worker's cache. Without that, every
// worker holds every prefix and all policies show the same hit ratio.
func SizePrefixes(cfg *Config, h Health) {
	bs := cfg.BlockSize
	if bs == 0 {
		bs = h.BlockSize
	}
	if bs <= 0 {
		bs = defaultBlockSize
	}
	capTokens, serving, known := 0, 0, 0
	for _, w := range h.Workers {
		if w.Role == "prefill" {
			continue // never serves a client's prompt from its own cache
		}
		serving++
		if w.KVBlocks <= 0 {
			continue
		}
		wbs := w.BlockSize
		if wbs <= 0 {
			wbs = bs
		}
		t := w.KVBlocks * wbs
		if known == 0 || t < capTokens {
			capTokens = t
		}
		known++
	}
	prefixTokens := cfg.PrefixTokens
	if cfg.PrefixWords > 0 {
		prefixTokens = int(math.Ceil(float64(cfg.PrefixWords) * tokensPerWord))
	}
	total := func() int { return cfg.Prefixes * prefixTokens }
	switch {
	case serving < 2:
		cfg.PrefixSizing = fmt.Sprintf("%d × %d tokens as given: the deployment has %d serving worker(s), and routing policies differ only with two or more",
			cfg.Prefixes, prefixTokens, serving)
		return
	case known == 0:
		cfg.PrefixSizing = fmt.Sprintf("%d × %d tokens as given: /health reports no worker's KV capacity, so whether they fit in one worker is unknown (pass --prefixes so that they do not)",
			cfg.Prefixes, prefixTokens)
		return
	}
	if cfg.AutoPrefixes {
		k := int(math.Ceil(prefixOverCapacity * float64(capTokens) / float64(prefixTokens)))
		k = max(2, min(k, maxAutoPrefixes))
		cfg.Prefixes = k
		if cfg.autoWarmup {
			cfg.Warmup = k
		}
		cfg.PrefixSizing = fmt.Sprintf("%d × %d tokens = %d tokens, %.1f× the smallest worker's KV cache (%d tokens): they do not fit in one worker (sized from /health; --prefixes overrides)",
			k, prefixTokens, total(), float64(total())/float64(capTokens), capTokens)
		return
	}
	if total() <= capTokens {
		cfg.PrefixSizing = fmt.Sprintf("%d × %d tokens = %d tokens fit in one worker's KV cache (%d tokens): every policy can keep every prefix everywhere and they will show the same hit ratio; omit --prefixes to size the set from the deployment",
			cfg.Prefixes, prefixTokens, total(), capTokens)
		return
	}
	cfg.PrefixSizing = fmt.Sprintf("%d × %d tokens = %d tokens, %.1f× the smallest worker's KV cache (%d tokens): they do not fit in one worker",
		cfg.Prefixes, prefixTokens, total(), float64(total())/float64(capTokens), capTokens)
}
