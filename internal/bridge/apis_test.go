package bridge

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// TestProbeAPIs: an endpoint the engine refuses as a bad request is one it
// serves; one it does not know (404, or 405) is not.
func TestProbeAPIs(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) })
	mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnprocessableEntity) })
	mux.HandleFunc("GET /v1/messages", func(w http.ResponseWriter, _ *http.Request) {}) // POST: 405
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b := &Bridge{cfg: Config{EngineURL: srv.URL, HTTPClient: srv.Client()}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if got := b.probeAPIs(context.Background()); !slices.Equal(got, []string{"responses", "embeddings"}) {
		t.Errorf("probed %v, want [responses embeddings]", got)
	}
}
