package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// TestClassesMatchRegexp2 checks the scanner's rune classes against the
// classes of tiktoken-go's regexp engine for every Unicode code point, so
// rare scripts the fuzzer is unlikely to reach are covered too.
func TestClassesMatchRegexp2(t *testing.T) {
	var b strings.Builder
	var all []rune
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if utf8.ValidRune(r) {
			all = append(all, r)
			b.WriteRune(r)
		}
	}
	text := b.String()
	want := make([]class, len(all)) // zero value classOther
	for _, p := range []struct {
		pattern string
		class   class
	}{
		{`\p{L}+`, classLetter},
		{`\p{N}+`, classNumber},
		{`\s+`, classSpace},
	} {
		re := regexp2.MustCompile(p.pattern, regexp2.None)
		m, err := re.FindStringMatch(text)
		for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
			for i := m.Index; i < m.Index+m.Length; i++ { // rune indexes
				if want[i] != classOther {
					t.Fatalf("%U is in two classes", all[i])
				}
				want[i] = p.class
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	bad := 0
	for i, r := range all {
		var got class
		if r < utf8.RuneSelf {
			got = asciiClass[r]
		} else {
			got = classOfSlow(r)
		}
		if got != want[i] {
			if bad++; bad <= 10 {
				t.Errorf("class of %U = %d, want %d", r, got, want[i])
			}
		}
	}
	if bad > 10 {
		t.Errorf("%d code points differ", bad)
	}
}
