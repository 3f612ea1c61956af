package msgpack

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestAppend pins every width at its boundaries against the bytes the
// MessagePack spec gives for them.
func TestAppend(t *testing.T) {
	s31, s32 := strings.Repeat("x", 31), strings.Repeat("x", 32)
	s256 := strings.Repeat("x", 256)
	s65536 := strings.Repeat("x", 65536)
	tests := []struct {
		name string
		got  []byte
		want []byte
	}{
		{"uint 0", AppendUint(nil, 0), []byte{0x00}},
		{"uint 127", AppendUint(nil, 127), []byte{0x7f}},
		{"uint 128", AppendUint(nil, 128), []byte{0xcc, 0x80}},
		{"uint 256", AppendUint(nil, 256), []byte{0xcd, 0x01, 0x00}},
		{"uint 65536", AppendUint(nil, 65536), []byte{0xce, 0x00, 0x01, 0x00, 0x00}},
		{"uint 2^32", AppendUint(nil, 1<<32), []byte{0xcf, 0, 0, 0, 1, 0, 0, 0, 0}},
		{"uint max", AppendUint(nil, math.MaxUint64), []byte{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"int 5", AppendInt(nil, 5), []byte{0x05}},
		{"int -1", AppendInt(nil, -1), []byte{0xff}},
		{"int -32", AppendInt(nil, -32), []byte{0xe0}},
		{"int -33", AppendInt(nil, -33), []byte{0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xdf}},
		{"int 300", AppendInt(nil, 300), []byte{0xcd, 0x01, 0x2c}},
		{"true", AppendBool(nil, true), []byte{0xc3}},
		{"false", AppendBool(nil, false), []byte{0xc2}},
		{"float 1.5", AppendFloat(nil, 1.5), []byte{0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}},
		{"array 15", AppendArrayHeader(nil, 15), []byte{0x9f}},
		{"array 16", AppendArrayHeader(nil, 16), []byte{0xdc, 0x00, 0x10}},
		{"array 65536", AppendArrayHeader(nil, 65536), []byte{0xdd, 0x00, 0x01, 0x00, 0x00}},
		{"str empty", AppendStr(nil, ""), []byte{0xa0}},
		{"str 31", AppendStr(nil, s31), append([]byte{0xbf}, s31...)},
		{"str 32", AppendStr(nil, s32), append([]byte{0xd9, 32}, s32...)},
		{"str 256", AppendStr(nil, s256), append([]byte{0xda, 0x01, 0x00}, s256...)},
		{"str 65536", AppendStr(nil, s65536), append([]byte{0xdb, 0x00, 0x01, 0x00, 0x00}, s65536...)},
		{"appends", AppendUint([]byte{0x92}, 1), []byte{0x92, 0x01}},
	}
	for _, tt := range tests {
		if !bytes.Equal(tt.got, tt.want) {
			t.Errorf("%s: got % x, want % x", tt.name, head(tt.got), head(tt.want))
		}
	}
}

// head keeps failure messages short for the long strings.
func head(b []byte) []byte { return b[:min(len(b), 12)] }

func TestAppendDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendArrayHeader(buf[:0], 3)
		b = AppendUint(b, math.MaxUint64)
		b = AppendInt(b, -1000)
		b = AppendStr(b, "worker-0")
		b = AppendBool(b, true)
		AppendFloat(b, 0.25)
	})
	if allocs != 0 {
		t.Errorf("%v allocations into a buffer with room, want 0", allocs)
	}
}
