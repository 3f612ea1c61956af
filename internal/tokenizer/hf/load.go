// Package hf loads a HuggingFace tokenizer.json of the byte-level BPE kind
// (Qwen2/Qwen3, Llama 3.x, DeepSeek V3) and encodes text to exactly the
// token ids the engine serving that model computes, and renders the
// families' chat templates (chat.go).
//
// Only what these families use is implemented, and everything else in a
// file is refused with an error naming the file and the component: a
// tokenizer that is almost right would make every prefix hash after the
// first differing token wrong, which is worse than failing to start.
package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"unicode/utf8"
)

// Tokenizer is a loaded tokenizer.json. It is immutable after Load and
// safe for concurrent use.
type Tokenizer struct {
	path string

	vocab  map[string]uint32 // raw token bytes to id, ordinary vocabulary
	tokens []string          // id to raw bytes (added tokens: their content)
	isSpec []bool            // id is a special added token

	merges       mergeTable  // left<<32|right to rank<<32|merged id
	byteID       [256]uint32 // the id of each single byte
	ignoreMerges bool
	// reach[id] caches whether BPE over the bytes of token id gives the
	// token itself (1) or not (2); 0 is not yet known. It lets a piece that
	// is a whole token skip the merge loop, exactly.
	reach []atomic.Uint32
	cache *pieceCache // nil: off (tests compare with and without)

	nfc    bool
	stages []stage

	added      []addedToken // all added tokens
	rawAdded   addedSet     // split out of the raw text
	normAdded  addedSet     // split out after normalization
	prefix     []uint32     // post-processor tokens before the text
	suffix     []uint32     // and after it
	unkID      uint32
	hasUnk     bool
	chatConfig chatConfig
}

// stage is one pre-tokenizer step: split each piece at the matches of m,
// keeping both the matches and the text between them (Isolated).
type stage struct {
	name string
	m    matcher
}

type addedToken struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type fileJSON struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         modelJSON       `json:"model"`
}

type modelJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

type component struct {
	Type string `json:"type"`
}

// Load reads a tokenizer.json, or the tokenizer.json in a folder, and the
// tokenizer_config.json beside it when there is one (for the chat
// template and the BOS/EOS tokens).
func Load(path string) (*Tokenizer, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w (want a tokenizer.json, the folder holding one, or a HuggingFace model id in the local cache)", err)
	}
	t, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	if cfg, err := os.ReadFile(cfgPath); err == nil {
		if err := t.parseConfig(cfgPath, cfg); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// Parse builds a tokenizer from the contents of a tokenizer.json; name is
// used in errors.
func Parse(name string, data []byte) (*Tokenizer, error) {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("tokenizer: %s: "+format, append([]any{name}, a...)...)
	}
	var f fileJSON
	if err := f.decode(data); err != nil {
		return nil, fail("not a valid tokenizer.json: %v", err)
	}
	t := &Tokenizer{path: name}
	for _, c := range []struct {
		what string
		raw  json.RawMessage
	}{{"truncation", f.Truncation}, {"padding", f.Padding}} {
		if !isNull(c.raw) {
			return nil, fail("%s is set; tokenizer.json files with %s are not supported", c.what, c.what)
		}
	}

	// Model.
	m := f.Model
	switch {
	case m.Type != "BPE":
		return nil, fail("model type %q is not supported (only byte-level \"BPE\")", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fail("model.dropout %v is not supported", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, fail("model.continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, fail("model.end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	case isNull(m.Vocab):
		return nil, fail("model.vocab is missing")
	}
	t.ignoreMerges = m.IgnoreMerges

	// Pre-tokenizer: Splits, Digits, then ByteLevel last.
	byteLevel := false
	var addStage func(raw json.RawMessage) error
	addStage = func(raw json.RawMessage) error {
		if isNull(raw) {
			return fail("pre_tokenizer is missing; only byte-level BPE tokenizers are supported")
		}
		var c struct {
			Type           string            `json:"type"`
			Pretokenizers  []json.RawMessage `json:"pretokenizers"`
			Pattern        map[string]string `json:"pattern"`
			Behavior       string            `json:"behavior"`
			Invert         bool              `json:"invert"`
			AddPrefixSpace bool              `json:"add_prefix_space"`
			UseRegex       *bool             `json:"use_regex"`
			Individual     bool              `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return fail("pre_tokenizer: %v", err)
		}
		if byteLevel {
			return fail("pre_tokenizer %q after ByteLevel is not supported", c.Type)
		}
		switch c.Type {
		case "Sequence":
			for _, p := range c.Pretokenizers {
				if err := addStage(p); err != nil {
					return err
				}
			}
		case "Split":
			if c.Behavior != "Isolated" || c.Invert {
				return fail("pre_tokenizer Split with behavior %q invert %v is not supported (only Isolated)", c.Behavior, c.Invert)
			}
			if re, ok := c.Pattern["Regex"]; ok {
				mt := knownPattern(re)
				if mt == nil {
					return fail("pre_tokenizer Split regex %q is not one of the known patterns (Qwen2/3, Llama 3, DeepSeek V3); its lookaheads need a hand-written matcher, so it is refused rather than guessed (use --tokenizer engine)", re)
				}
				t.stages = append(t.stages, stage{name: "Split", m: mt})
			} else if s, ok := c.Pattern["String"]; ok && s != "" {
				t.stages = append(t.stages, stage{name: "Split", m: literalMatcher(s)})
			} else {
				return fail("pre_tokenizer Split has no Regex or String pattern")
			}
		case "Digits":
			t.stages = append(t.stages, stage{name: "Digits", m: digitsMatcher{individual: c.Individual}})
		case "ByteLevel":
			if c.AddPrefixSpace {
				return fail("pre_tokenizer ByteLevel with add_prefix_space is not supported")
			}
			if c.UseRegex == nil || *c.UseRegex {
				return fail("pre_tokenizer ByteLevel with use_regex (the GPT-2 pattern) is not supported")
			}
			byteLevel = true
		default:
			return fail("pre_tokenizer %q is not supported (supported: Sequence, Split, Digits, ByteLevel)", c.Type)
		}
		return nil
	}
	if err := addStage(f.PreTokenizer); err != nil {
		return nil, err
	}
	if !byteLevel {
		return nil, fail("pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers are supported")
	}

	// Normalizer.
	var addNorm func(raw json.RawMessage) error
	addNorm = func(raw json.RawMessage) error {
		if isNull(raw) {
			return nil
		}
		var c struct {
			Type        string            `json:"type"`
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &c); err != nil {
			return fail("normalizer: %v", err)
		}
		switch c.Type {
		case "NFC":
			t.nfc = true
		case "Sequence":
			for _, n := range c.Normalizers {
				if err := addNorm(n); err != nil {
					return err
				}
			}
		default:
			return fail("normalizer %q is not supported (supported: NFC, Sequence)", c.Type)
		}
		return nil
	}
	if err := addNorm(f.Normalizer); err != nil {
		return nil, err
	}

	// Decoder.
	if !isNull(f.Decoder) {
		var c component
		if err := json.Unmarshal(f.Decoder, &c); err != nil {
			return nil, fail("decoder: %v", err)
		}
		if c.Type != "ByteLevel" {
			return nil, fail("decoder %q is not supported (only ByteLevel)", c.Type)
		}
	}

	// Vocabulary, in raw bytes: every token's bytes go into one arena
	// that becomes one string, which the vocabulary map and the id table
	// slice, instead of a string allocation per token.
	type entry struct {
		start, end uint32 // in arena
		id         uint32
		named      bool // not byte-level symbols: kept as written
	}
	entries := make([]entry, 0, len(m.Vocab)/12) // ~12 bytes of JSON per entry (measured on the three families: 11-14)
	maxID := uint32(0)
	arena := make([]byte, 0, len(m.Vocab)/2)
	err := scanVocab(m.Vocab, func(tok []byte, id uint32) error {
		start := len(arena)
		raw, ok := unByteLevel(arena, tok)
		if !ok {
			raw = append(arena[:start], tok...)
		}
		arena = raw
		if len(arena) > 1<<31 {
			return errors.New("implausibly large")
		}
		entries = append(entries, entry{start: uint32(start), end: uint32(len(arena)), id: id, named: !ok})
		maxID = max(maxID, id)
		return nil
	})
	if err != nil {
		return nil, fail("model.vocab: %v", err)
	}
	if len(entries) == 0 {
		return nil, fail("model.vocab is empty")
	}
	for _, a := range f.AddedTokens {
		maxID = max(maxID, a.ID)
	}
	if maxID > 1<<24 {
		return nil, fail("token id %d is implausibly large", maxID)
	}
	t.tokens = make([]string, maxID+1)
	t.isSpec = make([]bool, maxID+1)
	t.vocab = make(map[string]uint32, len(entries))
	byName := make(map[string]uint32, 8) // tokens that are not byte-level, by their text
	all := string(arena)
	for _, e := range entries {
		tok := all[e.start:e.end]
		if e.named {
			// Not made of byte-level symbols (DeepSeek's <｜begin▁of▁sentence｜>
			// is also an added token): BPE can never produce it.
			t.tokens[e.id] = tok
			byName[tok] = e.id
			continue
		}
		if prev, dup := t.vocab[tok]; dup {
			return nil, fail("model.vocab has token %q twice (ids %d and %d)", tok, prev, e.id)
		}
		t.vocab[tok] = e.id
		t.tokens[e.id] = tok
	}
	for b := range 256 {
		id, ok := t.vocab[string([]byte{byte(b)})]
		if !ok {
			return nil, fail("model.vocab lacks the byte-level symbol of byte 0x%02X", b)
		}
		t.byteID[b] = id
	}
	if m.UnkToken != nil {
		raw, ok := unByteLevel(nil, []byte(*m.UnkToken))
		id, in := t.vocab[string(raw)]
		if !ok || !in {
			id, in = byName[*m.UnkToken]
		}
		if !in {
			return nil, fail("model.unk_token %q is not in the vocabulary", *m.UnkToken)
		}
		t.unkID, t.hasUnk = id, true
	}
	t.reach = make([]atomic.Uint32, len(t.tokens))
	t.cache = newPieceCache()

	// Merges, string ("a b") or pair (["a","b"]) form.
	if err := t.loadMerges(m.Merges, fail); err != nil {
		return nil, err
	}

	// Added tokens.
	for _, a := range f.AddedTokens {
		if a.SingleWord {
			return nil, fail("added token %q has single_word, which is not supported", a.Content)
		}
		if a.Content == "" {
			return nil, fail("added token id %d has no content", a.ID)
		}
		t.tokens[a.ID] = a.Content
		t.isSpec[a.ID] = a.Special
		t.added = append(t.added, a)
	}
	var raw, norm []addedToken
	for _, a := range t.added {
		if a.Normalized && t.nfc {
			norm = append(norm, a)
		} else {
			raw = append(raw, a)
		}
	}
	t.rawAdded = newAddedSet(raw)
	t.normAdded = newAddedSet(norm)

	// Post-processor: only what adds BOS/EOS when asked to.
	if err := t.loadPostProcessor(f.PostProcessor, fail); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) loadMerges(raw json.RawMessage, fail func(string, ...any) error) error {
	pairs := make([]mergeSlot, 0, len(raw)/16) // ~16 bytes of JSON per merge or more
	var ab, bb, cat []byte
	rank := 0
	err := scanMerges(raw, func(a, b []byte) error {
		var okA, okB bool
		ab, okA = unByteLevel(ab[:0], a)
		bb, okB = unByteLevel(bb[:0], b)
		cat = append(append(cat[:0], ab...), bb...)
		idA, inA := t.vocab[string(ab)]
		idB, inB := t.vocab[string(bb)]
		idC, inC := t.vocab[string(cat)]
		if !okA || !okB || !inA || !inB || !inC {
			return fmt.Errorf("merges[%d] (%q, %q): a part or the merged token is not in the vocabulary", rank, a, b)
		}
		pairs = append(pairs, mergeSlot{key: uint64(idA)<<32 | uint64(idB), val: uint64(rank)<<32 | uint64(idC)})
		rank++
		return nil
	})
	if err != nil {
		return fail("model.merges: %v", err)
	}
	t.merges = newMergeTable(len(pairs))
	for _, p := range pairs {
		t.merges.set(p.key, p.val) // a repeated pair takes its last rank, as in HuggingFace tokenizers and transformers.js
	}
	return nil
}

// decode fills f from a tokenizer.json. model.vocab and model.merges stay
// raw, for scanVocab and scanMerges; the other members are decoded by
// encoding/json.
func (f *fileJSON) decode(data []byte) error {
	top, err := members(data)
	if err != nil {
		return err
	}
	rest := []byte{'{'}
	for _, m := range top {
		if m.key != "model" {
			rest = appendMember(rest, m)
			continue
		}
		mm, err := members(m.val)
		if err != nil {
			return fmt.Errorf("model: %w", err)
		}
		model := []byte{'{'}
		for _, x := range mm {
			switch x.key {
			case "vocab":
				f.Model.Vocab = x.val
			case "merges":
				f.Model.Merges = x.val
			default:
				model = appendMember(model, x)
			}
		}
		if err := json.Unmarshal(append(model, '}'), &f.Model); err != nil {
			return fmt.Errorf("model: %w", err)
		}
	}
	return json.Unmarshal(append(rest, '}'), f)
}

// appendMember appends "key": value to a JSON object being built.
func appendMember(obj []byte, m member) []byte {
	if len(obj) > 1 {
		obj = append(obj, ',')
	}
	key, _ := json.Marshal(m.key)
	obj = append(obj, key...)
	obj = append(obj, ':')
	return append(obj, m.val...)
}

func (t *Tokenizer) loadPostProcessor(raw json.RawMessage, fail func(string, ...any) error) error {
	if isNull(raw) {
		return nil
	}
	var c struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []map[string]struct {
			ID string `json:"id"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []uint32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return fail("post_processor: %v", err)
	}
	switch c.Type {
	case "ByteLevel":
	case "Sequence":
		for _, p := range c.Processors {
			if err := t.loadPostProcessor(p, fail); err != nil {
				return err
			}
		}
	case "TemplateProcessing":
		seen := false
		for _, piece := range c.Single {
			if st, ok := piece["SpecialToken"]; ok {
				sp, ok := c.SpecialTokens[st.ID]
				if !ok {
					return fail("post_processor TemplateProcessing names special token %q without its ids", st.ID)
				}
				if seen {
					t.suffix = append(t.suffix, sp.IDs...)
				} else {
					t.prefix = append(t.prefix, sp.IDs...)
				}
			} else if sq, ok := piece["Sequence"]; ok && sq.ID == "A" {
				seen = true
			} else {
				return fail("post_processor TemplateProcessing has an unsupported piece %v", piece)
			}
		}
	default:
		return fail("post_processor %q is not supported (supported: ByteLevel, TemplateProcessing, Sequence)", c.Type)
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// byteLevel maps each byte to the printable rune GPT-2's byte-level BPE
// writes it as; unByte is its inverse (-1: not a byte-level rune). The
// runes are all below 0x144.
var byteLevel, unByte = func() (fwd [256]rune, inv [0x144]int16) {
	for i := range inv {
		inv[i] = -1
	}
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			fwd[b] = rune(b)
		} else {
			fwd[b] = rune(256 + n)
			n++
		}
		inv[fwd[b]] = int16(b)
	}
	return fwd, inv
}()

// unByteLevel appends the raw bytes of a byte-level token to dst; ok is
// false when tok has a rune outside the byte-level alphabet.
func unByteLevel(dst []byte, tok []byte) ([]byte, bool) {
	for i := 0; i < len(tok); {
		c := tok[i]
		if c < utf8.RuneSelf {
			if unByte[c] < 0 {
				return dst, false
			}
			dst = append(dst, byte(unByte[c]))
			i++
			continue
		}
		r, n := utf8.DecodeRune(tok[i:])
		if int(r) >= len(unByte) || unByte[r] < 0 {
			return dst, false
		}
		dst = append(dst, byte(unByte[r]))
		i += n
	}
	return dst, true
}

// Path is the file the tokenizer was loaded from.
func (t *Tokenizer) Path() string { return t.path }

// VocabSize is one past the highest token id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }
