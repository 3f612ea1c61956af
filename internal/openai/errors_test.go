package openai

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestMuxErrorsAreEnvelopes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := Mux(mux)
	tests := []struct {
		name, method, path string
		status             int
		typ                string
		allow              string
	}{
		{"served", "POST", "/v1/completions", http.StatusTeapot, "", ""},
		{"unknown path", "POST", "/v1/embeddings", http.StatusNotFound, TypeNotFound, ""},
		{"root", "GET", "/", http.StatusNotFound, TypeNotFound, ""},
		{"wrong method", "GET", "/v1/completions", http.StatusMethodNotAllowed, TypeInvalidRequest, "POST"},
		{"wrong method on GET route", "DELETE", "/v1/models", http.StatusMethodNotAllowed, TypeInvalidRequest, "GET, HEAD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.status {
				t.Fatalf("status = %d, want %d (%s)", rec.Code, tc.status, rec.Body)
			}
			if got := rec.Header().Get("Allow"); got != tc.allow {
				t.Errorf("Allow = %q, want %q", got, tc.allow)
			}
			if tc.typ == "" {
				return
			}
			var e ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Type != tc.typ || e.Error.Code != tc.status || e.Error.Message == "" {
				t.Errorf("body %q is not an error envelope of type %s (%v)", rec.Body, tc.typ, err)
			}
		})
	}
}
