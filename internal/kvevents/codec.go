package kvevents

import (
	"errors"
	"fmt"
	"math"

	"github.com/switchyard-llm/switchyard/internal/msgpack"
)

// Wire format, version 1. Every message is one MessagePack array whose first
// element is the format version, so a decoder can reject what it does not
// understand and other languages can read it with any msgpack library:
//
//	batch:    [1, worker_id str, epoch uint, seq uint, unix_nano int, heartbeat bool, events array]
//	event:    [kind uint, parent uint, hashes array of uint, medium str]
//	snapshot: [1, worker_id str, epoch uint, seq uint, hashes array of uint, error str, lower array]
//	lower:    [medium str, hashes array of uint]
//
// medium is vLLM's name for the tier ("GPU", "CPU", "DISK"; see
// ParseMedium). Cleared events have no medium. An event without one (the
// first encoding had three fields) is GPU, and a snapshot without lower
// holds GPU blocks only. A medium the decoder does not know is read as
// TierDisk and counted in Batch.UnknownMedia, never rejected: a newer
// engine's tier must not cost the whole batch.
//
// Integers use the shortest msgpack encoding; the decoder accepts any width.
// The codec is hand-rolled: it does no reflection and, decoding into a
// reused Batch, no allocation.
const wireVersion = 1

// msgpack type bytes used here.
const (
	mpFalse  = 0xc2
	mpTrue   = 0xc3
	mpUint8  = 0xcc
	mpUint16 = 0xcd
	mpUint32 = 0xce
	mpUint64 = 0xcf
	mpInt8   = 0xd0
	mpInt16  = 0xd1
	mpInt32  = 0xd2
	mpInt64  = 0xd3
	mpStr8   = 0xd9
	mpStr16  = 0xda
	mpStr32  = 0xdb
	mpArr16  = 0xdc
	mpArr32  = 0xdd
)

// errMalformed is wrapped by every decode error.
var errMalformed = errors.New("kvevents: malformed message")

// AppendBatch appends b's encoding to dst and returns the extended slice.
func AppendBatch(dst []byte, b *Batch) []byte {
	dst = msgpack.AppendArrayHeader(dst, 7)
	dst = msgpack.AppendUint(dst, wireVersion)
	dst = msgpack.AppendStr(dst, b.WorkerID)
	dst = msgpack.AppendUint(dst, b.Epoch)
	dst = msgpack.AppendUint(dst, b.Seq)
	dst = msgpack.AppendInt(dst, b.UnixNano)
	dst = msgpack.AppendBool(dst, b.Heartbeat)
	dst = msgpack.AppendArrayHeader(dst, len(b.Events))
	for i := range b.Events {
		e := &b.Events[i]
		if e.Kind == Cleared {
			dst = msgpack.AppendArrayHeader(dst, 3)
		} else {
			dst = msgpack.AppendArrayHeader(dst, 4)
		}
		dst = msgpack.AppendUint(dst, uint64(e.Kind))
		dst = msgpack.AppendUint(dst, e.Parent)
		dst = appendUints(dst, e.Hashes)
		if e.Kind != Cleared {
			dst = msgpack.AppendStr(dst, e.Medium.String())
		}
	}
	return dst
}

// DecodeBatch decodes data into b, reusing b's Events and Hashes slices and,
// when unchanged, its WorkerID: decoding a stream of batches from one worker
// into the same Batch does not allocate. b is valid until the next decode
// into it. Errors wrap a "malformed message" error and leave b unspecified.
// Besides syntax it checks: known version and kinds, a non-empty worker ID,
// no hashes on Cleared, no events on a heartbeat.
func DecodeBatch(data []byte, b *Batch) error {
	d := decoder{buf: data}
	if n := d.array(); n != 7 && d.err == nil {
		return d.fail("batch has %d fields, want 7", n)
	}
	if v := d.uint(); v != wireVersion && d.err == nil {
		return d.fail("version %d, want %d", v, wireVersion)
	}
	b.WorkerID = d.str(b.WorkerID)
	b.Epoch = d.uint()
	b.Seq = d.uint()
	b.UnixNano = d.int()
	b.Heartbeat = d.bool()
	n := d.array()
	if d.err != nil {
		return d.err
	}
	if b.WorkerID == "" {
		return d.fail("empty worker id")
	}
	if b.Heartbeat && n > 0 {
		return d.fail("heartbeat with %d events", n)
	}
	b.Events = b.Events[:0]
	b.UnknownMedia = 0
	for i := 0; i < n; i++ {
		if len(b.Events) < cap(b.Events) {
			b.Events = b.Events[:i+1]
		} else {
			b.Events = append(b.Events, Event{})
		}
		e := &b.Events[i]
		f := d.array()
		if f != 3 && f != 4 && d.err == nil {
			return d.fail("event %d has %d fields, want 3 or 4", i, f)
		}
		k := d.uint()
		e.Parent = d.uint()
		e.Hashes = d.uints(e.Hashes[:0])
		e.Medium = TierGPU
		if f == 4 {
			// Cleared drops every tier: a medium on it means nothing.
			if t, ok := parseMediumBytes(d.strBytes()); k != uint64(Cleared) {
				e.Medium = t
				if !ok {
					b.UnknownMedia++
				}
			}
		}
		if d.err != nil {
			return d.err
		}
		switch e.Kind = Kind(k); {
		case k < uint64(Stored) || k > uint64(Cleared):
			return d.fail("event %d has kind %d", i, k)
		case e.Kind == Cleared && len(e.Hashes) > 0:
			return d.fail("event %d: cleared with %d hashes", i, len(e.Hashes))
		}
	}
	if d.off != len(d.buf) {
		return d.fail("%d trailing bytes", len(d.buf)-d.off)
	}
	return nil
}

// Snapshot is a worker's answer to a snapshot request: every block it holds
// at the moment its batch Seq was the last published, within Epoch. Err is
// set, and the rest empty, when the worker could not produce one.
type Snapshot struct {
	WorkerID string
	Epoch    uint64
	Seq      uint64
	Hashes   []uint64 // blocks in GPU memory
	Err      string
	// Lower lists the blocks held in each lower tier (a block may be in
	// several tiers and is then listed in each).
	Lower []TierHashes
	// UnknownMedia counts Lower entries whose medium the decoder did not
	// know (read as TierDisk). Not encoded.
	UnknownMedia int
}

// TierHashes is the blocks a snapshot lists for one tier.
type TierHashes struct {
	Medium Tier
	Hashes []uint64
}

// AppendSnapshot appends s's encoding to dst.
func AppendSnapshot(dst []byte, s *Snapshot) []byte {
	if len(s.Lower) == 0 {
		dst = msgpack.AppendArrayHeader(dst, 6)
	} else {
		dst = msgpack.AppendArrayHeader(dst, 7)
	}
	dst = msgpack.AppendUint(dst, wireVersion)
	dst = msgpack.AppendStr(dst, s.WorkerID)
	dst = msgpack.AppendUint(dst, s.Epoch)
	dst = msgpack.AppendUint(dst, s.Seq)
	dst = appendUints(dst, s.Hashes)
	dst = msgpack.AppendStr(dst, s.Err)
	if len(s.Lower) > 0 {
		dst = msgpack.AppendArrayHeader(dst, len(s.Lower))
		for _, l := range s.Lower {
			dst = msgpack.AppendArrayHeader(dst, 2)
			dst = msgpack.AppendStr(dst, l.Medium.String())
			dst = appendUints(dst, l.Hashes)
		}
	}
	return dst
}

// DecodeSnapshot decodes data into s, reusing s.Hashes.
func DecodeSnapshot(data []byte, s *Snapshot) error {
	d := decoder{buf: data}
	fields := d.array()
	if fields != 6 && fields != 7 && d.err == nil {
		return d.fail("snapshot has %d fields, want 6 or 7", fields)
	}
	if v := d.uint(); v != wireVersion && d.err == nil {
		return d.fail("version %d, want %d", v, wireVersion)
	}
	s.WorkerID = d.str(s.WorkerID)
	s.Epoch = d.uint()
	s.Seq = d.uint()
	s.Hashes = d.uints(s.Hashes[:0])
	s.Err = d.str(s.Err)
	s.Lower, s.UnknownMedia = s.Lower[:0], 0
	if fields == 7 {
		n := d.array()
		for i := 0; i < n && d.err == nil; i++ {
			if f := d.array(); f != 2 && d.err == nil {
				return d.fail("snapshot tier %d has %d fields, want 2", i, f)
			}
			t, ok := parseMediumBytes(d.strBytes())
			if !ok {
				s.UnknownMedia++
			}
			s.Lower = append(s.Lower, TierHashes{Medium: t, Hashes: d.uints(nil)})
		}
	}
	if d.err != nil {
		return d.err
	}
	if s.WorkerID == "" {
		return d.fail("empty worker id")
	}
	if d.off != len(d.buf) {
		return d.fail("%d trailing bytes", len(d.buf)-d.off)
	}
	return nil
}

func appendUints(dst []byte, vs []uint64) []byte {
	dst = msgpack.AppendArrayHeader(dst, len(vs))
	for _, v := range vs {
		dst = msgpack.AppendUint(dst, v)
	}
	return dst
}

// decoder reads msgpack values with a sticky error: after the first failure
// every read returns a zero value, so callers check err once per group.
type decoder struct {
	buf []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) error {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s (at byte %d)", errMalformed, fmt.Sprintf(format, args...), d.off)
	}
	return d.err
}

// take returns the next n bytes.
func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.buf)-d.off < n {
		d.fail("truncated: need %d bytes", n)
		return nil
	}
	p := d.buf[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) byte1() byte {
	p := d.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

func (d *decoder) be(n int) uint64 {
	p := d.take(n)
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v
}

// array reads an array header. The length is checked against the bytes
// left (every element takes at least one), so a hostile length cannot make
// the caller allocate more than the message size.
func (d *decoder) array() int {
	c := d.byte1()
	var n uint64
	switch {
	case d.err != nil:
		return 0
	case c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case c == mpArr16:
		n = d.be(2)
	case c == mpArr32:
		n = d.be(4)
	default:
		d.fail("type 0x%02x, want array", c)
		return 0
	}
	if d.err == nil && n > uint64(len(d.buf)-d.off) {
		d.fail("array of %d elements in %d bytes", n, len(d.buf)-d.off)
		return 0
	}
	return int(n)
}

func (d *decoder) uint() uint64 {
	c := d.byte1()
	switch {
	case d.err != nil:
		return 0
	case c < 0x80:
		return uint64(c)
	case c == mpUint8:
		return d.be(1)
	case c == mpUint16:
		return d.be(2)
	case c == mpUint32:
		return d.be(4)
	case c == mpUint64:
		return d.be(8)
	case c >= mpInt8 && c <= mpInt64:
		v := d.signed(c)
		if v < 0 {
			d.fail("negative %d, want unsigned", v)
			return 0
		}
		return uint64(v)
	}
	d.fail("type 0x%02x, want unsigned integer", c)
	return 0
}

// signed reads the body of a msgpack int8..int64 whose type byte is c.
func (d *decoder) signed(c byte) int64 {
	switch c {
	case mpInt8:
		return int64(int8(d.be(1)))
	case mpInt16:
		return int64(int16(d.be(2)))
	case mpInt32:
		return int64(int32(d.be(4)))
	}
	return int64(d.be(8))
}

func (d *decoder) int() int64 {
	c := d.byte1()
	switch {
	case d.err != nil:
		return 0
	case c < 0x80:
		return int64(c)
	case c >= 0xe0:
		return int64(int8(c))
	case c >= mpInt8 && c <= mpInt64:
		return d.signed(c)
	case c >= mpUint8 && c <= mpUint64:
		d.off--
		v := d.uint()
		if v > math.MaxInt64 {
			d.fail("integer %d overflows int64", v)
			return 0
		}
		return int64(v)
	}
	d.fail("type 0x%02x, want integer", c)
	return 0
}

func (d *decoder) bool() bool {
	switch c := d.byte1(); {
	case d.err != nil:
		return false
	case c == mpTrue:
		return true
	case c != mpFalse:
		d.fail("type 0x%02x, want bool", c)
	}
	return false
}

// str reads a string; it returns old without allocating when the bytes match.
func (d *decoder) str(old string) string {
	p := d.strBytes()
	if d.err != nil {
		return ""
	}
	if string(p) == old {
		return old
	}
	return string(p)
}

// strBytes reads a string and returns its bytes inside the buffer.
func (d *decoder) strBytes() []byte {
	c := d.byte1()
	var n uint64
	switch {
	case d.err != nil:
		return nil
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == mpStr8:
		n = d.be(1)
	case c == mpStr16:
		n = d.be(2)
	case c == mpStr32:
		n = d.be(4)
	default:
		d.fail("type 0x%02x, want string", c)
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.fail("string of %d bytes", n)
		return nil
	}
	return d.take(int(n))
}

func (d *decoder) uints(dst []uint64) []uint64 {
	n := d.array()
	if d.err != nil {
		return dst
	}
	dst = growTo(dst, n)
	for i := range dst {
		dst[i] = d.uint()
	}
	return dst
}

// growTo returns s with length n, reusing its storage when it fits.
func growTo(s []uint64, n int) []uint64 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]uint64, n)
}
