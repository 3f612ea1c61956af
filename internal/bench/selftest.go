package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// TrivialServer is an in-process OpenAI-compatible server that streams a
// fixed completion immediately: the cheapest possible deployment, used to
// measure bench's own ceiling. Start it with StartTrivialServer; Close
// waits for its goroutines.
type TrivialServer struct {
	URL string

	srv  *http.Server
	ln   net.Listener
	wg   sync.WaitGroup
	bufs sync.Pool
}

// StartTrivialServer listens on 127.0.0.1:0 and serves /health,
// /v1/models and streamed /v1/completions with `chunks` content chunks.
func StartTrivialServer(chunks int) (*TrivialServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: selftest listen: %w", err)
	}
	s := &TrivialServer{URL: "http://" + ln.Addr().String(), ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok","block_size":16,"workers":[{"id":"trivial","role":"both","events":{"state":"healthy"}}]}`)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"trivial","object":"model","created":0,"owned_by":"bench"}]}`)
	})
	chunk := []byte(`data: {"id":"x","object":"text_completion","created":0,"model":"trivial","choices":[{"index":0,"text":" tok","finish_reason":null,"logprobs":null}],"usage":null}` + "\n\n")
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		bp, _ := s.bufs.Get().(*bytes.Buffer)
		if bp == nil {
			bp = new(bytes.Buffer)
		}
		defer s.bufs.Put(bp)
		bp.Reset()
		if _, err := bp.ReadFrom(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n := promptLen(bp.Bytes())
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set(HeaderWorker, "trivial")
		f, _ := w.(http.Flusher)
		for range chunks {
			w.Write(chunk)
			if f != nil {
				f.Flush()
			}
		}
		usage := `data: {"id":"x","object":"text_completion","created":0,"model":"trivial","choices":[],"usage":{"prompt_tokens":` +
			strconv.Itoa(n) + `,"completion_tokens":` + strconv.Itoa(chunks) + `,"total_tokens":` + strconv.Itoa(n+chunks) +
			`,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\ndata: [DONE]\n\n"
		io.WriteString(w, usage)
	})
	s.srv = &http.Server{Handler: mux}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// promptLen counts the token IDs of a bench request body.
func promptLen(body []byte) int {
	i := bytes.Index(body, []byte(`"prompt":[`))
	if i < 0 {
		return 0
	}
	rest := body[i+len(`"prompt":[`):]
	j := bytes.IndexByte(rest, ']')
	if j <= 0 {
		return 0
	}
	return bytes.Count(rest[:j], []byte{','}) + 1
}

// Close stops the server and waits for it.
func (s *TrivialServer) Close() error {
	err := s.srv.Close()
	s.wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Selftest drives a TrivialServer with cfg's routing-shaped workload (small
// prompts, cfg.MaxTokens chunks each) and returns the report; its
// Aggregate.RequestsPerS is bench's own sustained streamed request rate.
func Selftest(ctx context.Context, cfg Config, progress *Progress) (*Report, error) {
	srv, err := StartTrivialServer(cfg.MaxTokens)
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	cfg.URL = srv.URL
	cfg.Scenario = ScenarioSelftest
	cfg.Policies, cfg.ResetCache = nil, false
	return Run(ctx, cfg, progress)
}
