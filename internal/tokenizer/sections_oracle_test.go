//go:build oracle

package tokenizer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// TestOracleSectionCache runs the real Qwen3, Llama 3 and DeepSeek V3
// tokenizers through the section cache (every section cached from its
// second sighting; each text three times): the golden cases must give the ids transformers.js recorded
// (hf/testdata/golden.jsonl, kept current by hf's TestOracleGolden), and
// chats, golden and growing turn by turn, the ids of hf's EncodeChat,
// which hf's TestOracleChatTokens holds to the oracle.
//
//	make tokenizer-oracle
func TestOracleSectionCache(t *testing.T) {
	cmd := exec.Command("node", "oracle.mjs", "paths")
	cmd.Dir = "../../test/tokenizer"
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the tokenizer oracle is not installed (make tokenizer-deps): %v", err)
	}
	var paths map[string]string
	if err := json.Unmarshal(out, &paths); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("hf/testdata/golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	type goldenCase struct {
		Family, Text string // Text: base64 of the bytes in the file
		IDs          []uint32
	}
	var golden []goldenCase
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var c goldenCase
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		text, err := base64.StdEncoding.DecodeString(c.Text)
		if err != nil {
			t.Fatal(err)
		}
		c.Text = string(text)
		golden = append(golden, c)
	}
	chats, err := os.ReadFile("hf/testdata/chat_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []struct {
			Family               string
			Messages             []openai.Message
			AddGenerationPrompt  bool  `json:"add_generation_prompt"`
			ContinueFinalMessage bool  `json:"continue_final_message"`
			EnableThinking       *bool `json:"enable_thinking"`
		}
	}
	if err := json.Unmarshal(chats, &g); err != nil {
		t.Fatal(err)
	}
	for _, family := range []string{"qwen3", "llama3", "deepseek_v3"} {
		t.Run(family, func(t *testing.T) {
			h := openCached(t, paths[family], 8<<20)
			n := 0
			for _, c := range golden {
				if c.Family != family {
					continue
				}
				n++
				for pass := range 3 { // unknown, seen, cached
					if got := h.Encode(c.Text); !slices.Equal(got, c.IDs) {
						t.Errorf("pass %d: %q: got %v, want %v", pass, c.Text, got, c.IDs)
					}
				}
			}
			if n == 0 {
				t.Fatal("no golden cases")
			}
			for _, c := range g.Cases {
				if c.Family != family {
					continue
				}
				o := ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt, ContinueFinalMessage: c.ContinueFinalMessage, EnableThinking: c.EnableThinking}
				for range 3 {
					checkChat(t, h, c.Messages, o)
				}
			}
			rng := rand.New(rand.NewPCG(3, 4))
			for range 10 {
				msgs := []openai.Message{{Role: "system", Content: randomTurn(rng)}}
				for turn := range 6 {
					role := "user"
					if turn%2 == 1 {
						role = "assistant"
					}
					msgs = append(msgs, openai.Message{Role: role, Content: randomTurn(rng)})
					checkChat(t, h, msgs, DefaultChat)
				}
			}
			if st := h.CacheStats(); st.Hits == 0 {
				t.Errorf("no cache hits: %+v", st)
			}
		})
	}
}

func checkChat(t *testing.T, h HF, msgs []openai.Message, o ChatOptions) {
	t.Helper()
	got, err := h.EncodeChat(msgs, o)
	want, werr := h.Tokenizer.EncodeChat(msgs, o)
	if (err == nil) != (werr == nil) || !slices.Equal(got, want) {
		t.Errorf("%v %+v: got %v, %v; want %v, %v", msgs, o, got, err, want, werr)
	}
}
