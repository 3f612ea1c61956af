package enginewire

import (
	"encoding/binary"
	"fmt"
)

// ReplayEnd is the sequence number of the replay socket's end marker.
const ReplayEnd = ^uint64(0)

// AppendSeq appends seq as the 8-byte big-endian frame the engines send.
func AppendSeq(dst []byte, seq uint64) []byte { return binary.BigEndian.AppendUint64(dst, seq) }

func seqOf(f []byte) (uint64, error) {
	if len(f) != 8 {
		return 0, fmt.Errorf("%w: sequence frame of %d bytes, want 8", ErrMalformed, len(f))
	}
	return binary.BigEndian.Uint64(f), nil
}

// ParseLive splits a message from the engine's PUB socket: [topic, seq,
// payload]. The slices alias frames.
func ParseLive(frames [][]byte) (topic []byte, seq uint64, payload []byte, err error) {
	if len(frames) != 3 {
		return nil, 0, nil, fmt.Errorf("%w: live message of %d frames, want 3 (topic, seq, payload)", ErrMalformed, len(frames))
	}
	seq, err = seqOf(frames[1])
	return frames[0], seq, frames[2], err
}

// ParseReplay splits one reply from the engine's replay ROUTER, in either
// layout, with or without the empty delimiter frame a DEALER may still see:
//
//	vLLM ≥ 0.26:        ["", topic, seq, payload]   end: ["", "", ff×8, ""]
//	older vLLM, SGLang: ["", seq, payload]          end: ["", ff×8, ""]
//
// end is true for the end marker (seq ReplayEnd), after which the replay of
// one request is complete.
func ParseReplay(frames [][]byte) (seq uint64, payload []byte, end bool, err error) {
	var sf, pf []byte
	switch len(frames) {
	case 4:
		sf, pf = frames[2], frames[3]
	case 3:
		// ["", seq, payload] or, without the delimiter, [topic, seq,
		// payload]: the same positions either way.
		sf, pf = frames[1], frames[2]
	case 2:
		sf, pf = frames[0], frames[1]
	default:
		return 0, nil, false, fmt.Errorf("%w: replay message of %d frames, want 2 to 4", ErrMalformed, len(frames))
	}
	if seq, err = seqOf(sf); err != nil {
		return 0, nil, false, err
	}
	return seq, pf, seq == ReplayEnd, nil
}

// ForEachExtraKey calls fn for every item of every block's extra_keys entry
// of e, in order: block is the block's index, item the item's msgpack bytes
// and str its contents when it is a string (nil otherwise). A nil entry has
// no items. It returns an error for an extra_keys that is not an array of
// nil-or-array entries.
func (e *Event) ForEachExtraKey(fn func(block int, item, str []byte)) error {
	if e.RawExtraKeys == nil {
		return nil
	}
	r := reader{buf: e.RawExtraKeys}
	n := r.array("extra_keys")
	for b := 0; b < n && r.err == nil; b++ {
		if r.isNil() {
			continue
		}
		m := r.array("extra_keys entry")
		for i := 0; i < m && r.err == nil; i++ {
			start := r.off
			var s []byte
			if r.isStr() {
				s = r.strBytes("extra key")
			} else {
				r.skip()
			}
			if r.err == nil {
				fn(b, r.buf[start:r.off], s)
			}
		}
	}
	return r.err
}
