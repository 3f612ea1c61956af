package linkemu

import "testing"

func TestTCPGoodput(t *testing.T) {
	r, err := ParseRate("1gbit")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.TCPGoodput().BytesPerSecond() / 1e6; got < 117 || got > 118.5 {
		t.Errorf("1 Gbit/s TCP goodput = %.2f MB/s, want ≈ 117.7", got)
	}
}
