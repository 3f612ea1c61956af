package bench

import (
	"math"
	"testing"
)

func TestModelMix(t *testing.T) {
	names, weights, ok := ParseModelMix("a:0.7, b:0.3")
	if !ok || len(names) != 2 || names[1] != "b" || weights[0] != 0.7 {
		t.Fatalf("ParseModelMix = %q %v %v", names, weights, ok)
	}
	for _, s := range []string{"qwen3-0.6b", "llama3:8b", "a:0.7", "a:0.7,b", "a:0,b:1", "a:x,b:1", ":1,b:1"} {
		if _, _, ok := ParseModelMix(s); ok {
			t.Errorf("ParseModelMix(%q) is a mix, want one model's name", s)
		}
	}
	m := newModelMix(names, weights)
	counts := map[string]int{}
	for range 1000 {
		counts[string(m.next())]++
	}
	// The golden-ratio sequence is equidistributed: 1,000 draws land
	// within a few of the weights' shares.
	if math.Abs(float64(counts[`"a"`])-700) > 5 || counts[`"a"`]+counts[`"b"`] != 1000 {
		t.Errorf("1000 draws gave %v, want 700 a and 300 b", counts)
	}
}
