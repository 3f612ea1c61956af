package kvpayload

import (
	"testing"
)

func TestFillChunkedEqualsWhole(t *testing.T) {
	const size = 16 * 114688
	whole := make([]byte, size)
	Fill(42, 0, whole)
	for _, chunk := range []int{8, 4096, 65536, 100000} {
		got := make([]byte, 0, size)
		for off := 0; off < size; off += chunk {
			n := min(chunk, size-off)
			b := make([]byte, n)
			Fill(42, off, b)
			got = append(got, b...)
		}
		if string(got) != string(whole) {
			t.Errorf("chunk %d: chunked payload differs from whole", chunk)
		}
	}
}

func TestVerify(t *testing.T) {
	b := make([]byte, 10000)
	Fill(7, 0, b)
	if err := Verify(7, 0, b); err != nil {
		t.Fatalf("Verify of good payload: %v", err)
	}
	if err := Verify(8, 0, b); err == nil {
		t.Error("Verify accepted a payload under the wrong hash")
	}
	for _, i := range []int{0, 4095, 4096, 9999} {
		c := append([]byte(nil), b...)
		c[i] ^= 1
		if err := Verify(7, 0, c); err == nil {
			t.Errorf("Verify missed a flipped bit at byte %d", i)
		}
	}
	// A tail piece at a non-zero offset verifies too.
	if err := Verify(7, 4096, b[4096:]); err != nil {
		t.Errorf("Verify at offset: %v", err)
	}
}

func TestDistinctHashesDistinctBytes(t *testing.T) {
	a, b := make([]byte, 64), make([]byte, 64)
	Fill(1, 0, a)
	Fill(2, 0, b)
	if string(a) == string(b) {
		t.Error("different hashes gave equal payloads")
	}
}

// BenchmarkFill measures payload generation; the target is ≥ 2 GB/s per core
// so that generating KV never limits a 10 GbE transfer.
func BenchmarkFill(b *testing.B) {
	buf := make([]byte, 16*114688) // one qwen3-0.6b block of 16 tokens
	b.SetBytes(int64(len(buf)))
	for i := 0; b.Loop(); i++ {
		Fill(uint64(i), 0, buf)
	}
}

func BenchmarkVerify(b *testing.B) {
	buf := make([]byte, 16*114688)
	Fill(3, 0, buf)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if err := Verify(3, 0, buf); err != nil {
			b.Fatal(err)
		}
	}
}
