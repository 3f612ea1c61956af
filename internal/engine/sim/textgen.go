package sim

import (
	"fmt"
	"sync"

	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// commonWords are the words the simulator "generates". Each is used only if
// the tokenizer encodes it, with its leading space, as a single token, so a
// generated token sequence decodes to readable text and token counts stay
// exact when the text is re-encoded.
var commonWords = []string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
	"not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
	"you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more",
	"when", "will", "would", "who", "so", "no", "time", "people", "year", "way", "day", "man", "thing",
	"woman", "life", "child", "world", "school", "state", "family", "student", "group", "country",
	"problem", "hand", "part", "place", "case", "week", "company", "system", "program", "question",
	"work", "government", "number", "night", "point", "home", "water", "room", "mother", "area",
	"money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word",
	"business", "issue", "side", "kind", "head", "house", "service", "friend", "father", "power",
	"hour", "game", "line", "end", "member", "law", "car", "city", "community", "name", "team",
	"minute", "idea", "kid", "body", "information", "back", "parent", "face", "others", "level",
	"office", "door", "health", "person", "art", "war", "history", "party", "result", "change",
	"morning", "reason", "research", "girl", "guy", "moment", "air", "teacher", "force", "education",
	"good", "new", "first", "last", "long", "great", "little", "own", "other", "old", "big", "high",
	"different", "small", "large", "next", "early", "young", "important", "few", "public", "bad",
	"same", "able", "quiet", "river", "light", "green", "garden", "train", "signal", "switch",
}

var (
	wordOnce   sync.Once
	wordTokens []uint32
	wordErr    error
)

// vocabulary returns the single-token words, in commonWords order.
func vocabulary() ([]uint32, error) {
	wordOnce.Do(func() {
		tok, err := tokenizer.New()
		if err != nil {
			wordErr = fmt.Errorf("sim: %w", err)
			return
		}
		for _, w := range commonWords {
			if ids := tok.Encode(" " + w); len(ids) == 1 {
				wordTokens = append(wordTokens, ids[0])
			}
		}
		if len(wordTokens) < 64 {
			wordErr = fmt.Errorf("sim: only %d single-token words in the tokenizer", len(wordTokens))
		}
	})
	return wordTokens, wordErr
}

// wordsFor returns the single-token words of a model's tokenizer; cl100k
// shares vocabulary's.
func wordsFor(m tokenizer.Model) ([]uint32, error) {
	if _, ok := m.(tokenizer.Cl100k); ok {
		return vocabulary()
	}
	var words []uint32
	for _, w := range commonWords {
		if ids := m.Encode(" " + w); len(ids) == 1 {
			words = append(words, ids[0])
		}
	}
	if len(words) < 64 {
		return nil, fmt.Errorf("sim: only %d single-token words in tokenizer %s", len(words), m.Name())
	}
	return words, nil
}

// splitmix64 is a tiny, well-mixed counter hash.
func splitmix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// genToken is output token i of a request with generation seed s.
func genToken(words []uint32, s uint64, i int) uint32 {
	return words[splitmix64(s^splitmix64(uint64(i)))%uint64(len(words))]
}

// naturalLength is where a request without max_tokens stops with "stop":
// a deterministic length between 16 and 256 tokens.
func naturalLength(s uint64) int { return 16 + int(splitmix64(s^0x5709)%241) }
