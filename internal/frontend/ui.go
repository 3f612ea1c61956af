package frontend

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
)

// uiPage is the dashboard at GET /ui: one self-contained page (inline
// style and script, no external assets) that polls /health, /admin/cluster
// and /metrics, so it shows nothing those do not.
//
//go:embed ui/index.html
var uiPage []byte

// uiCSP allows the page's own inline script (by hash) and style, requests
// to this origin only, and nothing else: no external asset can load.
var uiCSP = func() string {
	script := uiPage
	if i := bytes.Index(script, []byte("<script>")); i >= 0 {
		script = script[i+len("<script>"):]
	}
	if i := bytes.Index(script, []byte("</script>")); i >= 0 {
		script = script[:i]
	}
	sum := sha256.Sum256(script)
	return "default-src 'none'; script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

// handleUI serves the dashboard. It is admin-authenticated like /admin/*:
// an unauthorized request gets 401, with the page's key prompt as the body
// (a browser cannot send a bearer token when it navigates), and the page
// then sends the key it is given to the admin endpoints it reads. The page
// itself holds no data.
func (s *Server) handleUI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	if !s.adminAuthorized(r) {
		s.m.errors.WithLabelValues(errKindUnauthorized).Inc()
		w.WriteHeader(http.StatusUnauthorized)
	}
	_, _ = w.Write(uiPage)
}
