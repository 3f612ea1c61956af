package kvindex

import "testing"

func TestSplitLoRASalt(t *testing.T) {
	for _, c := range []struct{ adapter, salt string }{{"sql", ""}, {"sql", "tenant-a"}, {"", "x"}} {
		a, s, ok := SplitLoRASalt(LoRASalt(c.adapter, c.salt))
		if !ok || a != c.adapter || s != c.salt {
			t.Errorf("SplitLoRASalt(LoRASalt(%q, %q)) = %q %q %v", c.adapter, c.salt, a, s, ok)
		}
	}
	for _, s := range []string{"", "tenant-a", "lora"} {
		if _, _, ok := SplitLoRASalt(s); ok {
			t.Errorf("SplitLoRASalt(%q) ok, want not an adapter salt", s)
		}
	}
}
