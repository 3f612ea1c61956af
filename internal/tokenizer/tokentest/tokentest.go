// Package tokentest has helpers for tokenizer benchmarks: realistic
// English prompts, deterministic by seed, and the process's CPU time. It
// is imported by tests only.
package tokentest

import (
	"math/rand/v2"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// CPUTime is the process's user+system CPU time. On a shared machine wall
// time mostly measures the neighbours; CPU time is what a load costs.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var words = strings.Fields(`the of and to in is that for it as was with be by on not he this are or his from at which but
	have an had they you were their one all we can her has there been if more when will would who so no time people year
	way day man thing woman life child world school state family student group country problem hand part place case week
	company system program question work government number night point home water room mother area money story fact month
	lot right study book eye job word business issue side kind head house service friend father power hour game line end
	member law car city community name team minute idea kid body information back parent face others level office door
	health person art war history party result change morning reason research girl guy moment air teacher force education
	good new first last long great little own other old big high different small large next early young important few
	public bad same able quiet river light green garden train signal switch running measured tokenizer's weren't`)

// EnglishWords is an n-word English prompt: sentences of common words
// with capitals, commas and periods. The same seed gives the same text.
func EnglishWords(n int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	start := true
	for i := range n {
		w := words[rng.IntN(len(words))]
		if start {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
		start = false
		switch r := rng.IntN(20); {
		case r == 0:
			b.WriteByte(',')
		case r == 1 || i == n-1:
			b.WriteByte('.')
			start = true
		}
	}
	return b.String()
}

// EarlierTurns is the 1,400 words of earlier turns of the next-turn
// benchmarks (the shape of proxybench's next-turn case): a system prompt
// and two exchanges, the same on every call.
func EarlierTurns() []openai.Message {
	return []openai.Message{
		{Role: "system", Content: EnglishWords(100, 1)},
		{Role: "user", Content: EnglishWords(600, 2)},
		{Role: "assistant", Content: EnglishWords(300, 3)},
		{Role: "user", Content: EnglishWords(300, 4)},
		{Role: "assistant", Content: EnglishWords(100, 5)},
	}
}
