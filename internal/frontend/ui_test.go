package frontend

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestUIAdminAuthenticated(t *testing.T) {
	tests := []struct {
		name       string
		adminKey   string
		remote     string
		bearer     string
		wantStatus int
	}{
		{"loopback, no key configured", "", "127.0.0.1:5000", "", http.StatusOK},
		{"remote, no key configured", "", "10.0.0.9:5000", "", http.StatusUnauthorized},
		{"key configured, none sent", "k", "127.0.0.1:5000", "", http.StatusUnauthorized},
		{"key configured, wrong one", "k", "10.0.0.9:5000", "x", http.StatusUnauthorized},
		{"key configured and sent", "k", "10.0.0.9:5000", "k", http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newHarness(t, Config{AdminKey: tc.adminKey}, Deps{}).s
			req := httptest.NewRequest(http.MethodGet, "/ui", nil)
			req.RemoteAddr = tc.remote
			if tc.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+tc.bearer)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus {
				t.Errorf("status = %d, want %d", rec.Code, tc.wantStatus)
			}
			// The body is the page either way: unauthorized, it shows
			// only the key prompt, since every figure comes from admin
			// endpoints.
			if !strings.Contains(rec.Body.String(), `id="loginform"`) {
				t.Error("page body missing")
			}
			if got := rec.Header().Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'none'") {
				t.Errorf("CSP = %q", got)
			}
		})
	}
}

// TestUIPageSelfContained: no external asset, and the CSP's script hash is
// the inline script's, so the browser runs it.
func TestUIPageSelfContained(t *testing.T) {
	page := string(uiPage)
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(page); m != "" {
		t.Errorf("page references an external asset: %q", m)
	}
	i, j := strings.Index(page, "<script>"), strings.Index(page, "</script>")
	sum := sha256.Sum256([]byte(page[i+len("<script>") : j]))
	if want := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(uiCSP, want) {
		t.Errorf("CSP %q lacks the script hash %s", uiCSP, want)
	}
	if strings.Count(page, "<script") != 1 {
		t.Error("want exactly one inline script (the CSP hashes one)")
	}
}
