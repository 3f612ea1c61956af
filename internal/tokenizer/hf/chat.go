package hf

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Chat templates. The engines render a chat request with the model's Jinja
// template from tokenizer_config.json, then tokenize the text without
// adding special tokens. No maintained Go Jinja engine renders these
// templates byte for byte, so each family's template is written out here
// by hand, recognised from its text, and checked in the tests against
// Jinja2 itself rendering the real template (testdata/chat_golden.json,
// from test/tokenizer/render_chat_golden.py). A template that is not
// recognised is refused: use --tokenizer engine to have the engine render
// it.

// ChatOptions are the chat-template switches an OpenAI-style request can
// carry (vLLM's add_generation_prompt, continue_final_message and
// chat_template_kwargs.enable_thinking).
type ChatOptions struct {
	// AddGenerationPrompt opens the assistant's turn (the default for a
	// chat completion).
	AddGenerationPrompt bool
	// ContinueFinalMessage renders the last (assistant) message as a
	// prefill to continue: the text is cut just after its content, as
	// transformers does.
	ContinueFinalMessage bool
	// EnableThinking is Qwen3's thinking switch; nil leaves it undefined
	// (thinking on).
	EnableThinking *bool
}

// DefaultChat is a chat completion's default: the assistant turn opened.
var DefaultChat = ChatOptions{AddGenerationPrompt: true}

// Template families.
const (
	FamilyQwen3      = "qwen3"
	FamilyLlama3     = "llama3"
	FamilyLlama31    = "llama3_1"
	FamilyDeepSeekV3 = "deepseek_v3"
)

// ChatTemplate renders messages as one model family's template does.
type ChatTemplate struct {
	Family string
	bos    string
	// dated: Llama 3.1's "Today Date" is the current date (strftime_now,
	// as Llama 3.2 and 3.3 publish it) rather than the template's fixed
	// one.
	dated bool
	now   func() time.Time // the clock of a dated template; nil is time.Now
}

// ErrNoChatTemplate is returned for a tokenizer without a chat template.
var ErrNoChatTemplate = errors.New("no chat_template in tokenizer_config.json")

// Chat returns the tokenizer's chat template, recognised from the text of
// tokenizer_config.json's chat_template.
func (t *Tokenizer) Chat() (*ChatTemplate, error) {
	c := t.chatConfig
	if c.template == "" {
		where := "beside " + t.path
		if c.path != "" {
			where = c.path
		}
		return nil, fmt.Errorf("tokenizer: %w (%s); chat requests need the model's template: use the model's folder, or --tokenizer engine", ErrNoChatTemplate, where)
	}
	tp, err := newChatTemplate(c.template, c.bos)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", c.path, err)
	}
	return tp, nil
}

// newChatTemplate recognises a chat_template's family; bos is the
// tokenizer's BOS token text.
func newChatTemplate(tmpl, bos string) (*ChatTemplate, error) {
	fam, err := detectFamily(tmpl)
	if err != nil {
		return nil, err
	}
	tp := &ChatTemplate{Family: fam, bos: bos}
	if fam == FamilyLlama31 {
		tp.dated = strings.Contains(tmpl, "strftime_now")
	}
	return tp, nil
}

func detectFamily(tmpl string) (string, error) {
	has := func(subs ...string) bool {
		for _, s := range subs {
			if !strings.Contains(tmpl, s) {
				return false
			}
		}
		return true
	}
	switch {
	case has("<|im_start|>", "enable_thinking", "last_query_index", "reasoning_content"):
		return FamilyQwen3, nil
	case has("<|start_header_id|>", "<|eot_id|>", "Cutting Knowledge Date: December 2023", "Today Date: "):
		return FamilyLlama31, nil
	case has("<|start_header_id|>", "<|eot_id|>", "bos_token + content") && !has("Cutting Knowledge"):
		return FamilyLlama3, nil
	case has("<｜User｜>", "<｜Assistant｜>", "ns.system_prompt") && !has("<think>"):
		return FamilyDeepSeekV3, nil
	}
	head := tmpl
	if len(head) > 80 {
		head = head[:80] + "…"
	}
	return "", fmt.Errorf("chat_template %q is not one of the templates rendered here (Qwen3, Llama 3/3.1, DeepSeek V3); use --tokenizer engine to have the engine render it", head)
}

// Render returns the prompt text of msgs.
func (c *ChatTemplate) Render(msgs []openai.Message, o ChatOptions) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("chat template: no messages")
	}
	if o.ContinueFinalMessage {
		if o.AddGenerationPrompt {
			return "", errors.New("chat template: continue_final_message and add_generation_prompt cannot both be set")
		}
		if msgs[len(msgs)-1].Role != "assistant" {
			return "", errors.New("chat template: continue_final_message needs an assistant message last")
		}
	}
	// One allocation for the prompt: the turns plus their headers.
	n := 256
	for _, m := range msgs {
		n += len(m.Role) + len(m.Content) + 64
	}
	var b strings.Builder
	b.Grow(n)
	switch c.Family {
	case FamilyQwen3:
		renderQwen3(&b, msgs, o)
	case FamilyLlama3:
		renderLlama3(&b, c.bos, msgs, o)
	case FamilyLlama31:
		date := "26 Jul 2024"
		if c.dated {
			now := time.Now
			if c.now != nil {
				now = c.now
			}
			// strftime_now("%d %b %Y") in the engine's process: local
			// time, zero-padded day, C-locale month.
			date = now().Format("02 Jan 2006")
		}
		renderLlama31(&b, c.bos, date, msgs, o)
	case FamilyDeepSeekV3:
		renderDeepSeekV3(&b, c.bos, msgs, o)
	default:
		return "", fmt.Errorf("chat template: unknown family %q", c.Family)
	}
	out := b.String()
	if o.ContinueFinalMessage {
		final := pyStrip(msgs[len(msgs)-1].Content)
		i := strings.LastIndex(out, final)
		if i < 0 {
			return "", errors.New("chat template: the final message's content is not in the rendered prompt, so it cannot be continued")
		}
		out = out[:i+len(final)]
	}
	return out, nil
}

// EncodeChat renders msgs with the tokenizer's chat template and encodes
// the text, without added BOS/EOS (the template writes its own), as the
// engines do.
func (t *Tokenizer) EncodeChat(msgs []openai.Message, o ChatOptions) ([]uint32, error) {
	c, err := t.Chat()
	if err != nil {
		return nil, err
	}
	s, err := c.Render(msgs, o)
	if err != nil {
		return nil, err
	}
	return t.Encode(s), nil
}

// write writes parts to b in turn: the prompt is copied once, into b,
// where b.WriteString(x + y + z) would copy it into x + y + z first.
func write(b *strings.Builder, parts ...string) {
	for _, p := range parts {
		b.WriteString(p)
	}
}

// pyIsSpace is Python's str.isspace for one rune, which Jinja's trim and
// Python's strip() use.
func pyIsSpace(r rune) bool {
	switch {
	case r >= '\t' && r <= '\r', r >= 0x1C && r <= 0x20, r == 0x85, r == 0xA0, r == 0x1680,
		r >= 0x2000 && r <= 0x200A, r == 0x2028, r == 0x2029, r == 0x202F, r == 0x205F, r == 0x3000:
		return true
	}
	return false
}

func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }

func renderQwen3(b *strings.Builder, msgs []openai.Message, o ChatOptions) {
	if msgs[0].Role == "system" {
		write(b, "<|im_start|>system\n", msgs[0].Content, "<|im_end|>\n")
	}
	// The last user query that is not a tool response.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		c := msgs[i].Content
		if msgs[i].Role == "user" && !(strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	last := len(msgs) - 1
	for i, m := range msgs {
		switch {
		case m.Role == "user" || (m.Role == "system" && i != 0):
			write(b, "<|im_start|>", m.Role, "\n", m.Content, "<|im_end|>\n")
		case m.Role == "assistant":
			content, reasoning := m.Content, ""
			if strings.Contains(m.Content, "</think>") {
				content = strings.TrimLeft(m.Content[strings.LastIndex(m.Content, "</think>")+len("</think>"):], "\n")
				before := strings.TrimRight(m.Content[:strings.Index(m.Content, "</think>")], "\n")
				if k := strings.LastIndex(before, "<think>"); k >= 0 {
					before = before[k+len("<think>"):]
				}
				reasoning = strings.TrimLeft(before, "\n")
			}
			if i > lastQuery && (i == last || reasoning != "") {
				write(b, "<|im_start|>", m.Role, "\n<think>\n", strings.Trim(reasoning, "\n"), "\n</think>\n\n", strings.TrimLeft(content, "\n"))
			} else {
				write(b, "<|im_start|>", m.Role, "\n", content)
			}
			b.WriteString("<|im_end|>\n")
		case m.Role == "tool":
			if i == 0 || msgs[i-1].Role != "tool" {
				b.WriteString("<|im_start|>user")
			}
			write(b, "\n<tool_response>\n", m.Content, "\n</tool_response>")
			if i == last || msgs[i+1].Role != "tool" {
				b.WriteString("<|im_end|>\n")
			}
		}
	}
	if o.AddGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
		if o.EnableThinking != nil && !*o.EnableThinking {
			b.WriteString("<think>\n\n</think>\n\n")
		}
	}
}

func renderLlama3(b *strings.Builder, bos string, msgs []openai.Message, o ChatOptions) {
	for i, m := range msgs {
		if i == 0 {
			b.WriteString(bos)
		}
		write(b, "<|start_header_id|>", m.Role, "<|end_header_id|>\n\n", pyStrip(m.Content), "<|eot_id|>")
	}
	if o.AddGenerationPrompt {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
}

func renderLlama31(b *strings.Builder, bos, date string, msgs []openai.Message, o ChatOptions) {
	b.WriteString(bos)
	system := ""
	if msgs[0].Role == "system" {
		system = pyStrip(msgs[0].Content)
		msgs = msgs[1:]
	}
	b.WriteString("<|start_header_id|>system<|end_header_id|>\n\n")
	b.WriteString("Cutting Knowledge Date: December 2023\n")
	write(b, "Today Date: ", date, "\n\n")
	write(b, system, "<|eot_id|>")
	for _, m := range msgs {
		if m.Role == "tool" || m.Role == "ipython" {
			write(b, "<|start_header_id|>ipython<|end_header_id|>\n\n", m.Content, "<|eot_id|>")
			continue
		}
		write(b, "<|start_header_id|>", m.Role, "<|end_header_id|>\n\n", pyStrip(m.Content), "<|eot_id|>")
	}
	if o.AddGenerationPrompt {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
}

func renderDeepSeekV3(b *strings.Builder, bos string, msgs []openai.Message, o ChatOptions) {
	system, firstSystem := "", true
	for _, m := range msgs {
		if m.Role == "system" {
			if firstSystem {
				system += m.Content
				firstSystem = false
			} else {
				system += "\n\n" + m.Content
			}
		}
	}
	write(b, bos, system)
	isTool, firstOutput := false, true
	for _, m := range msgs {
		switch m.Role {
		case "user":
			isTool = false
			write(b, "<｜User｜>", m.Content)
		case "assistant":
			if isTool {
				write(b, "<｜tool▁outputs▁end｜>", m.Content, "<｜end▁of▁sentence｜>")
				isTool = false
			} else {
				write(b, "<｜Assistant｜>", m.Content, "<｜end▁of▁sentence｜>")
			}
		case "tool":
			isTool = true
			if firstOutput {
				write(b, "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>", m.Content, "<｜tool▁output▁end｜>")
				firstOutput = false
			} else {
				write(b, "\n<｜tool▁output▁begin｜>", m.Content, "<｜tool▁output▁end｜>")
			}
		}
	}
	if isTool {
		b.WriteString("<｜tool▁outputs▁end｜>")
	}
	if o.AddGenerationPrompt && !isTool {
		b.WriteString("<｜Assistant｜>")
	}
}
