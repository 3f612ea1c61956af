package bench

import (
	"math/rand/v2"
	"strings"
)

// Token IDs bench generates lie in [tokenLo, tokenHi): ordinary cl100k tokens
// (the vocabulary has 100,256), well away from the low byte-level IDs.
const (
	tokenLo   = 1000
	tokenHi   = 50000
	tokenSpan = tokenHi - tokenLo
)

// Stream domains keep the token streams of different uses apart even when
// their ids coincide.
const (
	domainPrefix uint64 = iota + 1
	domainSuffix
	domainUnique
	domainMooncake
	domainWords
)

// PromptBuilder generates deterministic token-ID prompts from a seed. The
// same (seed, domain, id) always yields the same tokens. It holds no mutable
// state and is safe for concurrent use.
type PromptBuilder struct {
	seed uint64
}

// NewPromptBuilder returns a builder for seed.
func NewPromptBuilder(seed int64) *PromptBuilder {
	return &PromptBuilder{seed: uint64(seed)}
}

// stream is a splitmix64 generator: tiny, allocation-free and good enough to
// make token streams that never repeat by accident.
type stream uint64

func (s *stream) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (s *stream) token() uint32 { return tokenLo + uint32(s.next()%tokenSpan) }

func (b *PromptBuilder) stream(domain, id uint64) stream {
	s := stream(b.seed*0x9e3779b97f4a7c15 ^ domain<<56 ^ id)
	s.next()
	return s
}

// appendID writes two tokens that encode id (base tokenSpan), so sequences
// built for different ids differ from their first two tokens on, whatever
// the random tokens after them.
func appendID(dst []uint32, id uint64) []uint32 {
	return append(dst, tokenLo+uint32(id%tokenSpan), tokenLo+uint32(id/tokenSpan%tokenSpan))
}

// appendSeq appends the first n tokens of the sequence (domain, id): two id
// tokens, then seeded random ones. Shorter requests for the same sequence
// are prefixes of longer ones.
func (b *PromptBuilder) appendSeq(dst []uint32, domain, id uint64, n int) []uint32 {
	var head [2]uint32
	appendID(head[:0], id)
	for i := 0; i < n && i < len(head); i++ {
		dst = append(dst, head[i])
	}
	s := b.stream(domain, id)
	for i := len(head); i < n; i++ {
		dst = append(dst, s.token())
	}
	return dst
}

// AppendPrefix appends shared prefix k of n tokens. Prefixes with different k
// differ from their first token on (for k < 49,000), so they never share a
// KV block by accident.
func (b *PromptBuilder) AppendPrefix(dst []uint32, k, n int) []uint32 {
	return b.appendSeq(dst, domainPrefix, uint64(k), n)
}

// AppendSuffix appends the unique suffix of request i, n tokens.
func (b *PromptBuilder) AppendSuffix(dst []uint32, i, n int) []uint32 {
	return b.appendSeq(dst, domainSuffix, uint64(i), n)
}

// AppendUnique appends an n-token prompt that shares no block with any other
// id's prompt: its first two tokens encode id.
func (b *PromptBuilder) AppendUnique(dst []uint32, id, n int) []uint32 {
	return b.appendSeq(dst, domainUnique, uint64(id), n)
}

// AppendMooncake appends the prompt of a Mooncake request: block i is the
// content of hashIDs[i] (512 tokens, truncated to what inputLen leaves for the
// last block). Equal ids give identical token blocks; different ids give
// blocks that differ in their first two tokens. Because a Mooncake id names
// the whole prefix up to its block, equal ids in the same position imply
// equal blocks before it too, so shared prefixes are real token prefixes.
func (b *PromptBuilder) AppendMooncake(dst []uint32, hashIDs []int64, inputLen int) []uint32 {
	for i, h := range hashIDs {
		n := min(MooncakeBlockTokens, inputLen-i*MooncakeBlockTokens)
		if n <= 0 {
			break
		}
		dst = b.appendSeq(dst, domainMooncake, uint64(h), n)
	}
	return dst
}

// words is a small vocabulary for readable prefixes (--prefix-words).
var words = strings.Fields(`the of and to in is that for it as was with be by on not he this are or
his from at which but have an they you were her she there been one all would their we him has when who
will more no if out so said what up its about into than them can only other new some could time these two
may then do first any my now such like our over man me even most made after also did many before must
through back years where much your way well down should because each just those people how too little state
good very make world still own see men work long get here between both life being under never day same
another know while last might us great old year off come since against go came right used take three
river garden engine signal harbor lantern meadow copper violin pocket orbit canyon ledger bridge winter
station valley thunder marble cotton silver castle forest planet window mirror ticket camera market`)

// WordText returns n space-separated words chosen by a seeded generator for
// prefix k. Tokenizing it gives a readable prefix; callers prepend an id so
// different prefixes still differ from the first token.
func (b *PromptBuilder) WordText(k, n int) string {
	s := b.stream(domainWords, uint64(k))
	r := rand.New(rand.NewPCG(s.next(), s.next()))
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[r.IntN(len(words))])
	}
	return sb.String()
}

// AppendWordPrefix appends prefix k built from text tokens: two id tokens,
// then toks (the tokenized WordText).
func AppendWordPrefix(dst []uint32, k int, toks []uint32) []uint32 {
	dst = appendID(dst, uint64(k))
	return append(dst, toks...)
}
