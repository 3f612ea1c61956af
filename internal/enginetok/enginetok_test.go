package enginetok

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// fakeEngine answers /tokenize like vLLM: a prompt becomes one id per
// byte (plus a BOS when special tokens are on); messages become their
// contents, with 7 for the generation prompt.
func fakeEngine(t *testing.T, calls *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.NotFound(rw, r)
			return
		}
		calls.Add(1)
		var req openai.TokenizeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "m" {
			http.Error(rw, "bad request", 400)
			return
		}
		var toks []uint32
		switch {
		case req.Prompt != nil:
			if req.AddSpecialTokens == nil || *req.AddSpecialTokens {
				toks = append(toks, 1)
			}
			for _, c := range []byte(*req.Prompt) {
				toks = append(toks, uint32(c))
			}
		default:
			for _, m := range req.Messages {
				for _, c := range []byte(m.Content) {
					toks = append(toks, uint32(c))
				}
			}
			if req.AddGenerationPrompt != nil && *req.AddGenerationPrompt {
				toks = append(toks, 7)
			}
		}
		json.NewEncoder(rw).Encode(map[string]any{"count": len(toks), "max_model_len": 100, "tokens": toks})
	}))
	t.Cleanup(s.Close)
	return s
}

func TestEngineTokenizer(t *testing.T) {
	var calls atomic.Int64
	eng := fakeEngine(t, &calls)
	down := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(503) }))
	defer down.Close()
	urls := []string{down.URL, eng.URL}
	tk, err := New(Config{Model: "m", Workers: func() []string { return urls }})
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.EncodePrompt("ab"); !slices.Equal(got, []uint32{1, 'a', 'b'}) {
		t.Errorf("EncodePrompt = %v", got)
	}
	if got := tk.Encode("ab"); !slices.Equal(got, []uint32{'a', 'b'}) {
		t.Errorf("Encode = %v", got)
	}
	got, err := tk.EncodeChat([]openai.Message{{Role: "user", Content: "hi"}}, tokenizer.DefaultChat)
	if err != nil || !slices.Equal(got, []uint32{'h', 'i', 7}) {
		t.Errorf("EncodeChat = %v, %v", got, err)
	}
	before := calls.Load()
	for range 5 {
		tk.EncodePrompt("ab") // cached: the same body
	}
	if calls.Load() != before {
		t.Errorf("cached prompt asked the engine %d more times", calls.Load()-before)
	}
	if st := tk.Stats(); st.Hits != 5 || st.Failures != 0 {
		t.Errorf("stats = %+v", st)
	}
	// No worker answers: no tokens, no error, a failure counted.
	urls = []string{down.URL}
	if got := tk.EncodePrompt("new"); got != nil {
		t.Errorf("with every worker down: %v, want nil", got)
	}
	if got, err := tk.EncodeChat([]openai.Message{{Role: "user", Content: "new"}}, tokenizer.DefaultChat); got != nil || err != nil {
		t.Errorf("chat with every worker down: %v, %v; want no tokens and no client error", got, err)
	}
	if st := tk.Stats(); st.Failures != 2 {
		t.Errorf("failures = %d, want 2", st.Failures)
	}
}

func TestCacheBounded(t *testing.T) {
	var calls atomic.Int64
	eng := fakeEngine(t, &calls)
	tk, _ := New(Config{Model: "m", CacheEntries: 2, Workers: func() []string { return []string{eng.URL} }})
	tk.EncodePrompt("a")
	tk.EncodePrompt("b")
	tk.EncodePrompt("c") // evicts "a"
	tk.EncodePrompt("a")
	if calls.Load() != 4 {
		t.Errorf("%d calls, want 4 (a evicted)", calls.Load())
	}
	if tk.lru.Len() != 2 {
		t.Errorf("cache holds %d, want 2", tk.lru.Len())
	}
}
