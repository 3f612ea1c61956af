package tokenizer

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// vocabFile is the cl100k_base rank file embedded in tiktoken-go-loader:
// one "base64(token) rank" pair per line, ranks dense from 0.
const vocabFile = "cl100k_base.tiktoken"

// ordinaryTokens is the number of ranks in vocabFile. The loader checks
// the file against it so a changed asset cannot silently shift IDs.
const ordinaryTokens = 100256

// specialTokens are cl100k_base's control tokens with the IDs tiktoken
// assigns them (they are not in the rank file). Encode never produces
// them; Decode renders them as their text, as tiktoken does.
var specialTokens = map[uint32]string{
	100257: "<|endoftext|>",
	100258: "<|fim_prefix|>",
	100259: "<|fim_middle|>",
	100260: "<|fim_suffix|>",
	100276: "<|endofprompt|>",
}

// vocab is the loaded BPE table: the rank of a token is its ID in
// cl100k_base. Immutable after loadVocab returns.
//
// A plain string-keyed map: packing short tokens into uint64 keys was
// tried and made no measurable difference (benchstat, p=0.16, n=8), as
// the lookups are bound by cache misses in a 100k-entry table, not
// hashing. A second, open-addressed table of packed keys beside the map
// (4 MB) made the real frontend's tokenize stage of a cold 1,500-word chat
// 184-224 → 164-186 µs, but its RSS growth in TestOversizedPromptsBounded
// went from +23 to +43 MB, past the test's bound, so it was taken out.
type vocab struct {
	ranks  map[string]uint32 // token bytes to ID
	tokens []string          // ID to bytes, specials included
}

// rank returns the ID of token s.
func (v *vocab) rank(s string) (uint32, bool) {
	id, ok := v.ranks[s]
	return id, ok
}

func loadVocab() (*vocab, error) {
	data, err := assets.Assets.ReadFile(vocabFile)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: read %s: %w", vocabFile, err)
	}
	v := &vocab{
		ranks:  make(map[string]uint32, ordinaryTokens),
		tokens: make([]string, 100277), // one past the highest special ID
	}
	buf := make([]byte, 0, 256)
	for line := 1; len(data) > 0; line++ {
		var row []byte
		row, data, _ = bytes.Cut(data, []byte{'\n'})
		if len(row) == 0 {
			continue
		}
		b64, num, ok := bytes.Cut(row, []byte{' '})
		if !ok {
			return nil, fmt.Errorf("tokenizer: %s line %d: no rank", vocabFile, line)
		}
		n := base64.StdEncoding.DecodedLen(len(b64))
		if cap(buf) < n {
			buf = make([]byte, 0, n)
		}
		m, err := base64.StdEncoding.Decode(buf[:n], b64)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s line %d: %w", vocabFile, line, err)
		}
		rank, err := strconv.ParseUint(string(num), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s line %d: %w", vocabFile, line, err)
		}
		if rank >= ordinaryTokens || v.tokens[rank] != "" {
			return nil, fmt.Errorf("tokenizer: %s line %d: rank %d out of range or repeated", vocabFile, line, rank)
		}
		tok := string(buf[:m])
		v.ranks[tok] = uint32(rank)
		v.tokens[rank] = tok
	}
	if n := len(v.ranks); n != ordinaryTokens {
		return nil, fmt.Errorf("tokenizer: %s has %d distinct tokens, want %d", vocabFile, n, ordinaryTokens)
	}
	for id, text := range specialTokens {
		v.tokens[id] = text
	}
	return v, nil
}
