// Package msgpack appends MessagePack values to a byte slice, each in its
// shortest encoding. It is the encoding half shared by Switchyard's two
// hand-rolled wire codecs (kvevents' own format and enginewire's vLLM/SGLang
// event payloads): no reflection, no allocation beyond growing dst.
//
// It does not decode: each codec's decoder has its own error model (sticky
// errors naming the field at fault) and accepts any width, not just the
// shortest. Safe for concurrent use (it has no state).
package msgpack

import (
	"encoding/binary"
	"math"
)

// AppendArrayHeader appends the header of an array of n elements.
func AppendArrayHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n)) // fixarray
	case n <= math.MaxUint16:
		return append(dst, 0xdc, byte(n>>8), byte(n)) // array 16
	}
	return append(dst, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n)) // array 32
}

// AppendUint appends v as a positive fixint or uint 8/16/32/64.
func AppendUint(dst []byte, v uint64) []byte {
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

// AppendInt appends v: as AppendUint when v >= 0, a negative fixint down to
// -32, int 64 below that.
func AppendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return AppendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
}

// AppendBool appends true or false.
func AppendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 0xc3)
	}
	return append(dst, 0xc2)
}

// AppendFloat appends v as a float 64.
func AppendFloat(dst []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(v))
}

// AppendStr appends s as a fixstr or str 8/16/32.
func AppendStr(dst []byte, s string) []byte {
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
