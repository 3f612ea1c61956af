// Package kvpayload generates the bytes of a simulated KV block and checks
// them. A block's payload is a pure function of its hash and size, so a
// receiver can verify every transferred byte without having seen the sender's
// memory, and no block's bytes need to be held between uses.
//
// Safe for concurrent use; allocation-free when the caller supplies the
// buffer.
package kvpayload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Fill writes the payload bytes [off, off+len(dst)) of the block with hash h
// into dst. off must be a multiple of 8. Generating a block in pieces gives
// the same bytes as generating it whole, so senders can stream in chunks.
func Fill(h uint64, off int, dst []byte) {
	if off%8 != 0 {
		panic("kvpayload: offset not a multiple of 8")
	}
	// wyrand-style counter generator: state = seed + k*increment, output is a
	// mix of the state. Random access by word index makes chunking free.
	const inc = 0xa0761d6478bd642f
	seed := h ^ 0xe7037ed1a0b428db
	k := uint64(off / 8)
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], word(seed+(k+1)*inc))
		k++
	}
	if i < len(dst) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], word(seed+(k+1)*inc))
		copy(dst[i:], tail[:])
	}
}

func word(s uint64) uint64 {
	hi, lo := bits.Mul64(s, s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// Verify reports whether payload is exactly the bytes of block h starting at
// offset off. It generates the expected bytes in small pieces, so it needs no
// allocation beyond a stack buffer.
func Verify(h uint64, off int, payload []byte) error {
	var buf [4096]byte
	for done := 0; done < len(payload); {
		n := min(len(buf), len(payload)-done)
		Fill(h, off+done, buf[:n])
		if !bytes.Equal(buf[:n], payload[done:done+n]) {
			for j := 0; j < n; j++ {
				if buf[j] != payload[done+j] {
					return fmt.Errorf("kvpayload: block %016x: byte %d differs", h, off+done+j)
				}
			}
		}
		done += n
	}
	return nil
}
