package enginewire

import (
	"encoding/binary"
	"math"
)

// Layout chooses which of the engines' payload shapes AppendBatch writes.
type Layout struct {
	// ArrayEvents writes events as tagged positional arrays (vLLM before
	// mid-2026, SGLang) instead of maps with a "type" key (vLLM 0.26).
	ArrayEvents bool
	// MapBatch writes the batch as a map instead of [ts, events, rank].
	MapBatch bool
	// BinHashes writes hashes as 32-byte bin whose last 8 bytes are the
	// hash (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	BinHashes bool
}

// AppendBatch appends b's msgpack encoding in layout l, as an engine would
// send it: default-valued fields omitted (map form) or trailing defaults
// dropped (array form). Only the fields Event carries are written; Medium
// GPU is written as "GPU". It is how the simulator speaks vLLM's wire and
// how tests make frames.
func AppendBatch(dst []byte, b *Batch, l Layout) []byte {
	if l.MapBatch {
		n := 2
		if b.HasDPRank {
			n++
		}
		dst = append(dst, 0x80|byte(n))
		dst = appendStr(dst, "ts")
		dst = appendFloat(dst, b.TS)
		dst = appendStr(dst, "events")
	} else {
		n := 2
		if b.HasDPRank {
			n++
		}
		dst = append(dst, 0x90|byte(n))
		dst = appendFloat(dst, b.TS)
	}
	dst = appendArrayHdr(dst, len(b.Events))
	for i := range b.Events {
		dst = appendEvent(dst, &b.Events[i], l)
	}
	if b.HasDPRank {
		if l.MapBatch {
			dst = appendStr(dst, "data_parallel_rank")
		}
		dst = appendInt(dst, int64(b.DPRank))
	}
	return dst
}

func appendEvent(dst []byte, e *Event, l Layout) []byte {
	type field struct {
		name string
		put  func([]byte) []byte
	}
	hashes := func(d []byte) []byte {
		d = appendArrayHdr(d, len(e.BlockHashes))
		for _, h := range e.BlockHashes {
			d = appendHash(d, h, l.BinHashes)
		}
		return d
	}
	medium := func(d []byte) []byte {
		if e.Medium == MediumUnknown {
			return appendStr(d, e.MediumName)
		}
		return appendStr(d, e.Medium.String())
	}
	var fields []field
	switch e.Kind {
	case BlockStored:
		parent := func(d []byte) []byte {
			if !e.HasParent {
				return append(d, 0xc0)
			}
			return appendHash(d, e.Parent, l.BinHashes)
		}
		tokens := func(d []byte) []byte {
			d = appendArrayHdr(d, len(e.TokenIDs))
			for _, t := range e.TokenIDs {
				d = appendInt(d, int64(t))
			}
			return d
		}
		fields = []field{{"block_hashes", hashes}, {"parent_block_hash", parent}, {"token_ids", tokens},
			{"block_size", func(d []byte) []byte { return appendInt(d, int64(e.BlockSize)) }},
			{"lora_id", nil}, {"medium", medium}}
		if e.LoraName != "" {
			fields = append(fields, field{"lora_name", func(d []byte) []byte { return appendStr(d, e.LoraName) }})
		}
		if e.RawExtraKeys != nil {
			for len(fields) < 7 {
				fields = append(fields, field{"lora_name", nil})
			}
			fields = append(fields, field{"extra_keys", func(d []byte) []byte { return append(d, e.RawExtraKeys...) }})
		}
	case BlockRemoved:
		fields = []field{{"block_hashes", hashes}, {"medium", medium}}
	}
	if l.ArrayEvents {
		dst = appendArrayHdr(dst, 1+len(fields))
		dst = appendStr(dst, e.Kind.String())
		for _, f := range fields {
			if f.put == nil {
				dst = append(dst, 0xc0)
			} else {
				dst = f.put(dst)
			}
		}
		return dst
	}
	n := 1
	for _, f := range fields {
		if f.put != nil {
			n++
		}
	}
	dst = append(dst, 0x80|byte(n))
	dst = appendStr(dst, "type")
	dst = appendStr(dst, e.Kind.String())
	for _, f := range fields {
		if f.put != nil {
			dst = appendStr(dst, f.name)
			dst = f.put(dst)
		}
	}
	return dst
}

func appendHash(dst []byte, h uint64, asBin bool) []byte {
	if asBin {
		dst = append(dst, 0xc4, 32)
		dst = append(dst, make([]byte, 24)...)
		return binary.BigEndian.AppendUint64(dst, h)
	}
	return appendUint(dst, h)
}

func appendArrayHdr(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(dst, 0xdc, byte(n>>8), byte(n))
	}
	return append(dst, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v < 0x80:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(dst, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return append(dst, 0xce, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

func appendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
}

func appendFloat(dst []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(v))
}

func appendStr(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = append(dst, 0xda, byte(n>>8), byte(n))
	default:
		dst = append(dst, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(dst, s...)
}

// AppendExtraKeys encodes extra_keys with the salt on the first block, as
// vLLM does for a request with cache_salt, for n blocks.
func AppendExtraKeys(dst []byte, salt string, n int) []byte {
	dst = appendArrayHdr(dst, n)
	for i := 0; i < n; i++ {
		if i == 0 && salt != "" {
			dst = append(dst, 0x91)
			dst = appendStr(dst, salt)
		} else {
			dst = append(dst, 0xc0)
		}
	}
	return dst
}
