package preflight

import (
	"strings"
	"testing"
)

// TestAuthErrorNamesTheRightKey: a refused /v1 call asks for the API key,
// a refused /admin call for the admin key.
func TestAuthErrorNamesTheRightKey(t *testing.T) {
	if err := httpError("POST /v1/chat/completions", 401, nil); !strings.Contains(err.Error(), "--api-key") || strings.Contains(err.Error(), "--admin-key") {
		t.Errorf("/v1 refused: %v; want it to name --api-key only", err)
	}
	if err := httpError("GET /admin/links", 401, nil); !strings.Contains(err.Error(), "--admin-key") {
		t.Errorf("/admin refused: %v; want it to name --admin-key", err)
	}
}
