package openai

import (
	"bytes"
	"encoding/json"
)

// UsageOf returns the top-level "usage" object of a completion or stream
// chunk, or nil when it has none or it is null; ok is false when doc is
// not a JSON object with a well-formed usage. It decodes only the usage
// object and walks past the rest: decoding a whole chunk into a struct,
// with its choices, cost the relay more than all of its byte searches.
//
// Keys match as encoding/json matches them (regardless of case, the last
// of two wins); a body whose keys carry escapes is left to encoding/json.
func UsageOf(doc []byte) (u *Usage, ok bool) {
	d := reader{b: doc}
	if !d.consume('{') {
		return nil, false
	}
	if d.consume('}') {
		return nil, true
	}
	var raw []byte
	for {
		d.ws()
		start := d.i
		if !d.skipString() {
			return nil, false
		}
		key := doc[start+1 : d.i-1]
		if !d.consume(':') {
			return nil, false
		}
		if bytes.IndexByte(key, '\\') >= 0 {
			return usageSlow(doc)
		}
		d.ws()
		vs := d.i
		if !d.skip(0) {
			return nil, false
		}
		if bytes.EqualFold(key, usageName) {
			raw = doc[vs:d.i]
		}
		if d.consume(',') {
			continue
		}
		if !d.consume('}') {
			return nil, false
		}
		break
	}
	if raw == nil || string(raw) == "null" {
		return nil, true
	}
	u = new(Usage)
	if usageFast(raw, u) {
		return u, true
	}
	*u = Usage{}
	if json.Unmarshal(raw, u) != nil {
		return nil, false
	}
	return u, true
}

// usageFast decodes a usage object of plain integers; false sends it to
// encoding/json (floats, escapes, a type error, anything unusual).
func usageFast(raw []byte, u *Usage) bool {
	d := reader{b: raw}
	return d.intObject(func(key []byte) bool {
		switch {
		case bytes.EqualFold(key, []byte("prompt_tokens")):
			return d.int(&u.PromptTokens)
		case bytes.EqualFold(key, []byte("completion_tokens")):
			return d.int(&u.CompletionTokens)
		case bytes.EqualFold(key, []byte("total_tokens")):
			return d.int(&u.TotalTokens)
		case bytes.EqualFold(key, []byte("prompt_tokens_details")):
			if d.literal("null") {
				u.PromptTokensDetails = nil
				return true
			}
			if u.PromptTokensDetails == nil {
				u.PromptTokensDetails = new(PromptTokensDetails)
			}
			det := u.PromptTokensDetails
			return d.intObject(func(key []byte) bool {
				if bytes.EqualFold(key, []byte("cached_tokens")) {
					return d.int(&det.CachedTokens)
				}
				return false // the KV tiers, or another field: encoding/json's

			})
		}
		return d.skip(0) // Usage has no other field: encoding/json skips it too
	})
}

// intObject walks an object, calling member with each key (positioned at
// its value), which must read the value.
func (d *reader) intObject(member func(key []byte) bool) bool {
	if !d.consume('{') {
		return false
	}
	if d.consume('}') {
		return true
	}
	for {
		d.ws()
		start := d.i
		if !d.skipString() {
			return false
		}
		key := d.b[start+1 : d.i-1]
		if bytes.IndexByte(key, '\\') >= 0 || !d.consume(':') || !member(key) {
			return false
		}
		if d.consume(',') {
			continue
		}
		return d.consume('}')
	}
}

// int reads a non-negative integer of at most 15 digits, as counts are.
func (d *reader) int(v *int) bool {
	d.ws()
	n, i := 0, d.i
	for i < len(d.b) && '0' <= d.b[i] && d.b[i] <= '9' && i-d.i < 15 {
		n = n*10 + int(d.b[i]-'0')
		i++
	}
	if i == d.i || i < len(d.b) && (d.b[i] == '.' || d.b[i] == 'e' || d.b[i] == 'E' || '0' <= d.b[i] && d.b[i] <= '9') {
		return false
	}
	if d.b[d.i] == '0' && i-d.i > 1 {
		return false // a leading zero is not JSON
	}
	d.i, *v = i, n
	return true
}

var usageName = []byte("usage")

func usageSlow(doc []byte) (*Usage, bool) {
	var v struct {
		Usage *Usage `json:"usage"`
	}
	if json.Unmarshal(doc, &v) != nil {
		return nil, false
	}
	return v.Usage, true
}
