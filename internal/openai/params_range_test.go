package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTypeErrorOutOfRange: a whole number too large for an integer field
// is out of range, not of the wrong type; a fraction is of the wrong type.
func TestTypeErrorOutOfRange(t *testing.T) {
	var v struct {
		MaxTokens *int `json:"max_tokens"`
	}
	for body, want := range map[string]string{
		`{"max_tokens":9223372036854775808}`: "out of range",
		`{"max_tokens":1.5}`:                 "want an integer",
	} {
		err := json.Unmarshal([]byte(body), &v)
		te, ok := err.(*json.UnmarshalTypeError)
		if !ok {
			t.Fatalf("%s: %v", body, err)
		}
		if _, msg := TypeError(te); !strings.Contains(msg, want) {
			t.Errorf("%s: %q; want %q", body, msg, want)
		}
	}
}
