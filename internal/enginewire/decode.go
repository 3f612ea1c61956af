package enginewire

import "encoding/binary"

// Field order of the positional (array_like) forms, after the tag. msgspec
// writes fields in declaration order and drops trailing defaults, so a
// shorter array is a valid one.
var (
	storedFields = [...]string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
		"medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window",
		"locality", "ownership", "session_id"}
	removedFields = [...]string{"block_hashes", "medium", "group_idx", "locality", "ownership"}
)

// DecodeBatch decodes one msgpack KVEventBatch payload into b, reusing b's
// event, hash and token storage: decoding a stream into the same Batch does
// not allocate once it has grown (a LoRA name or an unknown medium name
// allocates when it changes). Errors wrap ErrMalformed and leave b
// unspecified. Events of an unknown type decode with Kind 0.
func DecodeBatch(data []byte, b *Batch) error {
	r := reader{buf: data}
	b.TS, b.DPRank, b.HasDPRank = 0, 0, false
	b.Events = b.Events[:0]
	n, isMap, ok := r.container()
	switch {
	case r.err != nil:
		return r.err
	case !ok:
		r.fail("batch: type 0x%02x, want array or map", r.peek())
		return r.err
	}
	sawEvents := false
	for i := 0; i < n && r.err == nil; i++ {
		var name string
		if isMap {
			if !r.isStr() {
				r.skip()
				r.skip()
				continue
			}
			name = string(r.strBytes("batch key"))
		} else {
			switch i {
			case 0:
				name = "ts"
			case 1:
				name = "events"
			case 2:
				name = "data_parallel_rank"
			}
		}
		switch name {
		case "ts":
			if !r.isNil() {
				b.TS = r.float("ts")
			}
		case "events":
			sawEvents = true
			decodeEvents(&r, b)
		case "data_parallel_rank", "attn_dp_rank":
			if !r.isNil() {
				b.DPRank, b.HasDPRank = r.smallInt(name), true
			}
		default:
			r.skip()
		}
	}
	if r.err != nil {
		return r.err
	}
	if !sawEvents {
		r.fail("batch has no events field")
		return r.err
	}
	if r.off != len(r.buf) {
		r.fail("%d trailing bytes after the batch", len(r.buf)-r.off)
	}
	return r.err
}

func decodeEvents(r *reader, b *Batch) {
	n := r.array("events")
	for i := 0; i < n && r.err == nil; i++ {
		if len(b.Events) < cap(b.Events) {
			b.Events = b.Events[:i+1]
		} else {
			b.Events = append(b.Events, Event{})
		}
		decodeEvent(r, &b.Events[i])
	}
}

// reset clears e for reuse, keeping its slices' storage and strings.
func (e *Event) reset() {
	*e = Event{BlockHashes: e.BlockHashes[:0], TokenIDs: e.TokenIDs[:0], LoraName: e.LoraName,
		CacheSalt: e.CacheSalt, MediumName: e.MediumName}
}

func decodeEvent(r *reader, e *Event) {
	prevLora, prevSalt := e.LoraName, e.CacheSalt
	e.reset()
	e.LoraName, e.CacheSalt = "", ""
	n, isMap, ok := r.container()
	if !ok {
		if r.err == nil {
			r.fail("event: type 0x%02x, want array or map", r.peek())
		}
		return
	}
	if n == 0 {
		r.fail("event with no type tag")
		return
	}
	if !isMap {
		e.Kind = kindOf(r.strBytes("event tag"))
		fields := eventFields(e.Kind)
		for i := 1; i < n && r.err == nil; i++ {
			if i-1 < len(fields) {
				eventField(r, e, fields[i-1], prevLora, prevSalt)
			} else {
				r.skip()
			}
		}
		finishEvent(e)
		return
	}
	// Map form: the type tag is the first key by msgspec's layout, but read
	// it wherever it is; fields before it are buffered by position.
	start := r.off
	sawType := false
	for i := 0; i < n && r.err == nil; i++ {
		if !r.isStr() {
			r.skip()
			r.skip()
			continue
		}
		k := r.strBytes("event key")
		if string(k) == "type" {
			e.Kind = kindOf(r.strBytes("event type"))
			sawType = true
			break
		}
		r.skip()
	}
	if r.err != nil {
		return
	}
	if !sawType {
		r.fail("event map has no \"type\" key")
		return
	}
	r.off = start
	for i := 0; i < n && r.err == nil; i++ {
		if !r.isStr() {
			r.skip()
			r.skip()
			continue
		}
		k := r.strBytes("event key")
		if string(k) == "type" {
			r.skip()
			continue
		}
		if e.Kind == 0 {
			r.skip()
			continue
		}
		eventField(r, e, string(k), prevLora, prevSalt)
	}
	finishEvent(e)
}

func kindOf(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return BlockStored
	case "BlockRemoved":
		return BlockRemoved
	case "AllBlocksCleared":
		return AllBlocksCleared
	}
	return 0
}

func eventFields(k Kind) []string {
	switch k {
	case BlockStored:
		return storedFields[:]
	case BlockRemoved:
		return removedFields[:]
	}
	return nil
}

// eventField decodes the field called name into e, skipping fields that do
// not belong to e's kind and fields this decoder does not use.
func eventField(r *reader, e *Event, name, prevLora, prevSalt string) {
	if r.isNil() {
		return // msgspec writes None for optional fields left unset
	}
	switch name {
	case "block_hashes":
		n := r.array("block_hashes")
		e.BlockHashes = growU64(e.BlockHashes, n)
		r.hashes(e.BlockHashes)
	case "parent_block_hash":
		e.Parent, e.HasParent = r.hash("parent_block_hash"), true
	case "token_ids":
		n := r.array("token_ids")
		e.TokenIDs = growU32(e.TokenIDs, n)
		r.tokens(e.TokenIDs)
	case "block_size":
		e.BlockSize = r.smallInt("block_size")
	case "medium":
		p := r.strBytes("medium")
		e.Medium = ParseMedium(p)
		if e.Medium == MediumUnknown && string(p) != e.MediumName {
			e.MediumName = string(p)
		}
	case "lora_id":
		v, _ := r.integer("lora_id") // vLLM's lora_int_id: any width
		e.LoraID = int64(v)
	case "lora_name":
		e.LoraName = sameOr(r.strBytes("lora_name"), prevLora)
	case "cache_salt":
		e.CacheSalt = sameOr(r.strBytes("cache_salt"), prevSalt)
	case "extra_keys":
		e.RawExtraKeys = r.raw()
	case "group_idx":
		e.GroupIdx = r.smallInt("group_idx")
	case "kv_cache_spec_kind":
		switch string(r.strBytes("kv_cache_spec_kind")) {
		case "full_attention", "full", "":
		default:
			if e.Skip == SkipNone {
				e.Skip = SkipSpec
			}
		}
	default:
		r.skip()
	}
}

// sameOr returns prev when p spells it, so that decoding a name the
// previous event of the slot already held allocates nothing (the
// comparison does not allocate), and a new string otherwise.
func sameOr(p []byte, prev string) string {
	if string(p) == prev {
		return prev
	}
	return string(p)
}

func finishEvent(e *Event) {
	if e.GroupIdx != 0 {
		e.Skip = SkipGroup
	}
}

// tokens reads len(dst) token ids. The common encodings are read inline:
// this loop is most of the bridge's decode time (16 ids a block).
func (r *reader) tokens(dst []uint32) {
	buf, off := r.buf, r.off
	for i := range dst {
		if r.err != nil {
			return
		}
		if off < len(buf) {
			switch c := buf[off]; {
			case c < 0x80:
				dst[i] = uint32(c)
				off++
				continue
			case c == 0xcd && off+3 <= len(buf):
				dst[i] = uint32(binary.BigEndian.Uint16(buf[off+1:]))
				off += 3
				continue
			case c == 0xce && off+5 <= len(buf):
				dst[i] = binary.BigEndian.Uint32(buf[off+1:])
				off += 5
				continue
			}
		}
		r.off = off
		v, neg := r.integer("token id")
		if r.err == nil && (neg || v > 1<<32-1) {
			r.fail("token id %d out of range", int64(v))
		}
		dst[i] = uint32(v)
		off = r.off
	}
	r.off = off
}

// hashes reads len(dst) block hashes, uint64 inline.
func (r *reader) hashes(dst []uint64) {
	buf := r.buf
	for i := range dst {
		if r.err != nil {
			return
		}
		if off := r.off; off+9 <= len(buf) && buf[off] == 0xcf {
			dst[i] = binary.BigEndian.Uint64(buf[off+1:])
			r.off += 9
			continue
		}
		dst[i] = r.hash("block hash")
	}
}

func growU64(s []uint64, n int) []uint64 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]uint64, n, n+n/4)
}

func growU32(s []uint32, n int) []uint32 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]uint32, n, n+n/4)
}
