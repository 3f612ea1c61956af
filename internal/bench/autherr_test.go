package bench

import (
	"strings"
	"testing"
)

// TestAuthErrorNamesTheRightKey: a refused /v1 call asks for the API key,
// a refused /admin call for the admin key.
func TestAuthErrorNamesTheRightKey(t *testing.T) {
	if err := errAdmin("GET /v1/models", 401, ""); !strings.Contains(err.Error(), "--api-key") || strings.Contains(err.Error(), "--admin-key") {
		t.Errorf("/v1 refused: %v; want it to name --api-key only", err)
	}
	if err := errAdmin("PUT /admin/router", 401, ""); !strings.Contains(err.Error(), "--admin-key") {
		t.Errorf("/admin refused: %v; want it to name --admin-key", err)
	}
}
