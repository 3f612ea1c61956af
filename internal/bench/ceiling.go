package bench

import "container/list"

// LRUCeiling replays the prefix blocks of a Mooncake trace (hash_ids,
// MooncakeBlockTokens each, the last one truncated to the input) through a
// single LRU cache of capacity tokens (≤ 0: unbounded) and returns the
// token hit ratio: cached ÷ prompt tokens, counting for each request its
// leading blocks found in the cache, rounded down to whole engine blocks of
// blockTokens and leaving at least the last prompt token to compute, as the
// engine does. After its lookup a request's blocks are all inserted or
// refreshed, the least recently used evicted first.
//
// It is what a perfect router could reach with that much cache in one
// place: routing spreads requests over separate caches, so a real cluster
// of the same total capacity gets at most this, usually less. Requests
// without hash_ids count as misses. Cost: O(total hash_ids) time, O(distinct
// ids) memory.
func LRUCeiling(reqs []TraceRequest, capacity int64, blockTokens int) float64 {
	type blk struct {
		id   int64
		size int64
	}
	lru := list.New() // front: most recently used
	byID := map[int64]*list.Element{}
	var used int64
	var prompt, cached int64
	for _, r := range reqs {
		prompt += int64(r.InputTokens)
		hit, matching := int64(0), true
		for i, id := range r.HashIDs {
			size := int64(min(MooncakeBlockTokens, r.InputTokens-i*MooncakeBlockTokens))
			e, ok := byID[id]
			if matching && ok && e.Value.(*blk).size >= size {
				hit += size
			} else {
				matching = false
			}
			switch {
			case ok:
				b := e.Value.(*blk)
				used += max(size, b.size) - b.size
				b.size = max(size, b.size)
				lru.MoveToFront(e)
			default:
				byID[id] = lru.PushFront(&blk{id: id, size: size})
				used += size
			}
		}
		for capacity > 0 && used > capacity && lru.Len() > 0 {
			b := lru.Remove(lru.Back()).(*blk)
			delete(byID, b.id)
			used -= b.size
		}
		hit = min(hit, int64(r.InputTokens-1))
		if blockTokens > 0 {
			hit = hit / int64(blockTokens) * int64(blockTokens)
		}
		cached += max(hit, 0)
	}
	if prompt == 0 {
		return 0
	}
	return float64(cached) / float64(prompt)
}
