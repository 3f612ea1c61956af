package enginewire

import (
	"errors"
	"fmt"
	"math"
)

// ErrMalformed is wrapped by every decode error.
var ErrMalformed = errors.New("enginewire: malformed payload")

// maxDepth bounds nesting while skipping unknown values, so a hostile
// payload cannot exhaust the stack.
const maxDepth = 32

// reader reads msgpack values with a sticky error: after the first failure
// every read returns a zero value, so callers check err once per group.
type reader struct {
	buf []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s (at byte %d)", ErrMalformed, fmt.Sprintf(format, args...), r.off)
	}
}

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.buf)-r.off) {
		r.fail("truncated: need %d bytes, have %d", n, len(r.buf)-r.off)
		return nil
	}
	p := r.buf[r.off : r.off+int(n)]
	r.off += int(n)
	return p
}

func (r *reader) be(n uint64) uint64 {
	var v uint64
	for _, c := range r.take(n) {
		v = v<<8 | uint64(c)
	}
	return v
}

// peek returns the next type byte without consuming it; 0xc1 (never used by
// msgpack) at the end or after an error.
func (r *reader) peek() byte {
	if r.err != nil || r.off >= len(r.buf) {
		return 0xc1
	}
	return r.buf[r.off]
}

func (r *reader) byte1() byte {
	p := r.take(1)
	if p == nil {
		return 0xc1
	}
	return p[0]
}

// nil consumes a nil if one is next and says whether it did.
func (r *reader) isNil() bool {
	if r.peek() == 0xc0 {
		r.off++
		return true
	}
	return false
}

// container reads an array (isMap false) or map header, checking the count
// against the bytes left (every element takes at least one byte).
func (r *reader) container() (n int, isMap bool, ok bool) {
	c := r.byte1()
	var v uint64
	switch {
	case r.err != nil:
		return 0, false, false
	case c&0xf0 == 0x90:
		v = uint64(c & 0x0f)
	case c == 0xdc:
		v = r.be(2)
	case c == 0xdd:
		v = r.be(4)
	case c&0xf0 == 0x80:
		v, isMap = uint64(c&0x0f), true
	case c == 0xde:
		v, isMap = r.be(2), true
	case c == 0xdf:
		v, isMap = r.be(4), true
	default:
		r.off--
		return 0, false, false
	}
	need := v
	if isMap {
		need *= 2
	}
	if r.err == nil && need > uint64(len(r.buf)-r.off) {
		r.fail("container of %d elements in %d bytes", v, len(r.buf)-r.off)
		return 0, false, false
	}
	return int(v), isMap, r.err == nil
}

// array reads an array header; anything else is an error.
func (r *reader) array(what string) int {
	n, isMap, ok := r.container()
	if !ok || isMap {
		if r.err == nil {
			r.fail("%s: type 0x%02x, want array", what, r.peek())
		}
		return 0
	}
	return n
}

// int64 reads any msgpack integer as its two's-complement 64-bit pattern;
// signed says whether it was a negative-capable signed encoding with a
// negative value.
func (r *reader) integer(what string) (v uint64, neg bool) {
	c := r.byte1()
	switch {
	case r.err != nil:
		return 0, false
	case c < 0x80:
		return uint64(c), false
	case c >= 0xe0:
		return uint64(int64(int8(c))), true
	case c == 0xcc:
		return r.be(1), false
	case c == 0xcd:
		return r.be(2), false
	case c == 0xce:
		return r.be(4), false
	case c == 0xcf:
		return r.be(8), false
	case c == 0xd0:
		x := int64(int8(r.be(1)))
		return uint64(x), x < 0
	case c == 0xd1:
		x := int64(int16(r.be(2)))
		return uint64(x), x < 0
	case c == 0xd2:
		x := int64(int32(r.be(4)))
		return uint64(x), x < 0
	case c == 0xd3:
		x := int64(r.be(8))
		return uint64(x), x < 0
	}
	r.off--
	r.fail("%s: type 0x%02x, want integer", what, c)
	return 0, false
}

// smallInt reads an integer that must fit an int (sizes, ranks, indexes).
func (r *reader) smallInt(what string) int {
	v, neg := r.integer(what)
	if r.err != nil {
		return 0
	}
	if neg {
		if int64(v) < math.MinInt32 {
			r.fail("%s: %d out of range", what, int64(v))
			return 0
		}
		return int(int64(v))
	}
	if v > math.MaxInt32 {
		r.fail("%s: %d out of range", what, v)
		return 0
	}
	return int(v)
}

// hash reads a block hash: an integer of any width and sign (its 64-bit
// two's-complement pattern), or bin bytes of which the last 8 are read
// big-endian (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
func (r *reader) hash(what string) uint64 {
	c := r.peek()
	switch c {
	case 0xc4, 0xc5, 0xc6:
		p := r.bin()
		if r.err == nil && len(p) == 0 {
			r.fail("%s: empty bin", what)
		}
		if len(p) > 8 {
			p = p[len(p)-8:]
		}
		var v uint64
		for _, b := range p {
			v = v<<8 | uint64(b)
		}
		return v
	}
	v, _ := r.integer(what)
	return v
}

func (r *reader) bin() []byte {
	c := r.byte1()
	switch c {
	case 0xc4:
		return r.take(r.be(1))
	case 0xc5:
		return r.take(r.be(2))
	case 0xc6:
		return r.take(r.be(4))
	}
	if r.err == nil {
		r.off--
		r.fail("type 0x%02x, want bin", c)
	}
	return nil
}

// strBytes reads a string and returns its bytes, aliasing the buffer.
func (r *reader) strBytes(what string) []byte {
	c := r.byte1()
	var n uint64
	switch {
	case r.err != nil:
		return nil
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9:
		n = r.be(1)
	case c == 0xda:
		n = r.be(2)
	case c == 0xdb:
		n = r.be(4)
	default:
		r.off--
		r.fail("%s: type 0x%02x, want string", what, c)
		return nil
	}
	return r.take(n)
}

// isStr says whether a string is next.
func (r *reader) isStr() bool {
	c := r.peek()
	return c&0xe0 == 0xa0 || c == 0xd9 || c == 0xda || c == 0xdb
}

// float reads a float or an integer as float64.
func (r *reader) float(what string) float64 {
	c := r.peek()
	switch c {
	case 0xca:
		r.off++
		return float64(math.Float32frombits(uint32(r.be(4))))
	case 0xcb:
		r.off++
		return math.Float64frombits(r.be(8))
	}
	v, neg := r.integer(what)
	if neg {
		return float64(int64(v))
	}
	return float64(v)
}

// skip consumes one value of any type.
func (r *reader) skip() { r.skipDepth(0) }

func (r *reader) skipDepth(depth int) {
	if depth > maxDepth {
		r.fail("nested deeper than %d", maxDepth)
		return
	}
	c := r.byte1()
	switch {
	case r.err != nil:
	case c < 0x80 || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
	case c&0xe0 == 0xa0:
		r.take(uint64(c & 0x1f))
	case c&0xf0 == 0x90 || c == 0xdc || c == 0xdd || c&0xf0 == 0x80 || c == 0xde || c == 0xdf:
		r.off--
		n, isMap, _ := r.container()
		if isMap {
			n *= 2
		}
		for i := 0; i < n && r.err == nil; i++ {
			r.skipDepth(depth + 1)
		}
	case c == 0xc4 || c == 0xd9:
		r.take(r.be(1))
	case c == 0xc5 || c == 0xda:
		r.take(r.be(2))
	case c == 0xc6 || c == 0xdb:
		r.take(r.be(4))
	case c == 0xca:
		r.take(4)
	case c == 0xcb:
		r.take(8)
	case c == 0xcc || c == 0xd0:
		r.take(1)
	case c == 0xcd || c == 0xd1:
		r.take(2)
	case c == 0xce || c == 0xd2:
		r.take(4)
	case c == 0xcf || c == 0xd3:
		r.take(8)
	case c == 0xd4:
		r.take(2)
	case c == 0xd5:
		r.take(3)
	case c == 0xd6:
		r.take(5)
	case c == 0xd7:
		r.take(9)
	case c == 0xd8:
		r.take(17)
	case c == 0xc7:
		r.take(r.be(1) + 1)
	case c == 0xc8:
		r.take(r.be(2) + 1)
	case c == 0xc9:
		r.take(r.be(4) + 1)
	default:
		r.off--
		r.fail("type 0x%02x is not msgpack", c)
	}
}

// raw consumes one value and returns its encoded bytes.
func (r *reader) raw() []byte {
	start := r.off
	r.skip()
	if r.err != nil {
		return nil
	}
	return r.buf[start:r.off]
}
