package hf

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// TestChatGolden renders each case of testdata/chat_golden.json (Jinja2
// rendering the real templates in testdata/templates, see
// test/tokenizer/render_chat_golden.py) and wants the same bytes.
func TestChatGolden(t *testing.T) {
	data, err := os.ReadFile("testdata/chat_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		StrftimeNow string `json:"strftime_now"`
		Cases       []struct {
			Family               string           `json:"family"`
			Case                 string           `json:"case"`
			Messages             []openai.Message `json:"messages"`
			AddGenerationPrompt  bool             `json:"add_generation_prompt"`
			ContinueFinalMessage bool             `json:"continue_final_message"`
			EnableThinking       *bool            `json:"enable_thinking"`
			Rendered             string           `json:"rendered"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	now, err := time.ParseInLocation("2006-01-02T15:04:05", g.StrftimeNow, time.Local)
	if err != nil {
		t.Fatalf("strftime_now %q: %v", g.StrftimeNow, err)
	}
	bos := map[string]string{FamilyQwen3: "", FamilyLlama3: "<|begin_of_text|>", FamilyLlama31: "<|begin_of_text|>", FamilyDeepSeekV3: "<｜begin▁of▁sentence｜>"}
	seen := map[string]int{}
	for _, c := range g.Cases {
		tmpl, err := os.ReadFile("testdata/templates/" + c.Family + ".jinja")
		if err != nil {
			t.Fatal(err)
		}
		wantFam, wantDated := c.Family, false
		if c.Family == "llama3_1_dated" {
			wantFam, wantDated = FamilyLlama31, true
		}
		tp, err := newChatTemplate(string(tmpl), bos[wantFam])
		if err != nil || tp.Family != wantFam || tp.dated != wantDated {
			t.Fatalf("%s template detected as %+v, %v", c.Family, tp, err)
		}
		tp.now = func() time.Time { return now }
		got, err := tp.Render(c.Messages, ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt, ContinueFinalMessage: c.ContinueFinalMessage, EnableThinking: c.EnableThinking})
		if err != nil {
			t.Errorf("%s/%s: %v", c.Family, c.Case, err)
			continue
		}
		if got != c.Rendered {
			t.Errorf("%s/%s:\n got %q\nwant %q", c.Family, c.Case, got, c.Rendered)
		}
		seen[c.Family]++
	}
	if len(seen) != 5 {
		t.Errorf("golden cases cover %v, want all five templates", seen)
	}
}

func TestChatRefusesUnknownTemplate(t *testing.T) {
	_, err := detectFamily("{% for m in messages %}<start_of_turn>{{ m.content }}{% endfor %}")
	if err == nil || !strings.Contains(err.Error(), "--tokenizer engine") {
		t.Errorf("unknown template: %v, want advice to use --tokenizer engine", err)
	}
	tk := tiny(t, false)
	if _, err := tk.Chat(); err == nil || !strings.Contains(err.Error(), "no chat_template") {
		t.Errorf("no template: %v", err)
	}
}
