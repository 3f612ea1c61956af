package enginewire

import (
	"encoding/binary"

	"github.com/switchyard-llm/switchyard/internal/msgpack"
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
		dst = msgpack.AppendStr(dst, "ts")
		dst = msgpack.AppendFloat(dst, b.TS)
		dst = msgpack.AppendStr(dst, "events")
	} else {
		n := 2
		if b.HasDPRank {
			n++
		}
		dst = append(dst, 0x90|byte(n))
		dst = msgpack.AppendFloat(dst, b.TS)
	}
	dst = msgpack.AppendArrayHeader(dst, len(b.Events))
	for i := range b.Events {
		dst = appendEvent(dst, &b.Events[i], l)
	}
	if b.HasDPRank {
		if l.MapBatch {
			dst = msgpack.AppendStr(dst, "data_parallel_rank")
		}
		dst = msgpack.AppendInt(dst, int64(b.DPRank))
	}
	return dst
}

func appendEvent(dst []byte, e *Event, l Layout) []byte {
	type field struct {
		name string
		put  func([]byte) []byte
	}
	hashes := func(d []byte) []byte {
		d = msgpack.AppendArrayHeader(d, len(e.BlockHashes))
		for _, h := range e.BlockHashes {
			d = appendHash(d, h, l.BinHashes)
		}
		return d
	}
	medium := func(d []byte) []byte {
		if e.Medium == MediumUnknown {
			return msgpack.AppendStr(d, e.MediumName)
		}
		return msgpack.AppendStr(d, e.Medium.String())
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
			d = msgpack.AppendArrayHeader(d, len(e.TokenIDs))
			for _, t := range e.TokenIDs {
				d = msgpack.AppendInt(d, int64(t))
			}
			return d
		}
		fields = []field{{"block_hashes", hashes}, {"parent_block_hash", parent}, {"token_ids", tokens},
			{"block_size", func(d []byte) []byte { return msgpack.AppendInt(d, int64(e.BlockSize)) }},
			{"lora_id", nil}, {"medium", medium}}
		if e.LoraID != 0 {
			fields[4].put = func(d []byte) []byte { return msgpack.AppendInt(d, e.LoraID) }
		}
		if e.LoraName != "" {
			fields = append(fields, field{"lora_name", func(d []byte) []byte { return msgpack.AppendStr(d, e.LoraName) }})
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
		dst = msgpack.AppendArrayHeader(dst, 1+len(fields))
		dst = msgpack.AppendStr(dst, e.Kind.String())
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
	dst = msgpack.AppendStr(dst, "type")
	dst = msgpack.AppendStr(dst, e.Kind.String())
	for _, f := range fields {
		if f.put != nil {
			dst = msgpack.AppendStr(dst, f.name)
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
	return msgpack.AppendUint(dst, h)
}

// AppendExtraKeys encodes extra_keys with the salt on the first block, as
// vLLM does for a request with cache_salt, for n blocks.
func AppendExtraKeys(dst []byte, salt string, n int) []byte {
	dst = msgpack.AppendArrayHeader(dst, n)
	for i := 0; i < n; i++ {
		if i == 0 && salt != "" {
			dst = append(dst, 0x91)
			dst = msgpack.AppendStr(dst, salt)
		} else {
			dst = append(dst, 0xc0)
		}
	}
	return dst
}

// AppendLoRAExtraKeys encodes extra_keys as vLLM does for a LoRA adapter's
// n blocks: the adapter's name on every block, and the salt after it on
// the first when there is one.
func AppendLoRAExtraKeys(dst []byte, adapter, salt string, n int) []byte {
	dst = msgpack.AppendArrayHeader(dst, n)
	for i := 0; i < n; i++ {
		if i == 0 && salt != "" {
			dst = append(dst, 0x92)
			dst = msgpack.AppendStr(dst, adapter)
			dst = msgpack.AppendStr(dst, salt)
		} else {
			dst = append(dst, 0x91)
			dst = msgpack.AppendStr(dst, adapter)
		}
	}
	return dst
}
