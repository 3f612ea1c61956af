package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/node"
)

func TestFrontendFlagsMapToConfig(t *testing.T) {
	t.Setenv(envAPIKey, "")
	t.Setenv(envAdminKey, "")
	var stderr bytes.Buffer
	f, code := parseFrontendFlags([]string{"--header-timeout", "5s", "--request-timeout", "90s", "--max-body-bytes", "1024"}, Env{Stderr: &stderr})
	if code != -1 {
		t.Fatalf("code %d: %s", code, stderr.String())
	}
	if f.node.HeaderTimeout != 5*time.Second || f.node.RequestTimeout != 90*time.Second || f.node.MaxBodyBytes != 1024 {
		t.Errorf("config %+v", f.node)
	}
	u, code := parseUpFlags([]string{"--request-timeout", "1m"}, Env{Stderr: &stderr})
	if code != -1 || u.frontend.RequestTimeout != time.Minute || u.frontend.HeaderTimeout != 60*time.Second || u.frontend.MaxBodyBytes != 8<<20 {
		t.Errorf("up: code %d config %+v", code, u.frontend)
	}
	for _, bad := range [][]string{{"--header-timeout", "0s"}, {"--request-timeout", "-1s"}, {"--max-body-bytes", "0"}} {
		if _, code := parseFrontendFlags(bad, Env{Stderr: &stderr}); code != ExitUsage {
			t.Errorf("%v: code %d, want %d", bad, code, ExitUsage)
		}
	}
}

func TestKeysFromEnvironment(t *testing.T) {
	tests := []struct {
		name               string
		args               []string
		envAPI, envAdmin   string
		wantAPI, wantAdmin string
	}{
		{"env only", nil, "ek", "ea", "ek", "ea"},
		{"flags win", []string{"--api-key", "fk", "--admin-key", "fa"}, "ek", "ea", "fk", "fa"},
		{"neither", nil, "", "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envAPIKey, tc.envAPI)
			t.Setenv(envAdminKey, tc.envAdmin)
			var stderr bytes.Buffer
			f, code := parseFrontendFlags(tc.args, Env{Stderr: &stderr})
			if code != -1 {
				t.Fatalf("code %d: %s", code, stderr.String())
			}
			if f.node.APIKey != tc.wantAPI || f.node.AdminKey != tc.wantAdmin {
				t.Errorf("frontend keys %q %q, want %q %q", f.node.APIKey, f.node.AdminKey, tc.wantAPI, tc.wantAdmin)
			}
			u, code := parseUpFlags(tc.args, Env{Stderr: &stderr})
			if code != -1 || u.frontend.APIKey != tc.wantAPI || u.frontend.AdminKey != tc.wantAdmin {
				t.Errorf("up: code %d keys %q %q", code, u.frontend.APIKey, u.frontend.AdminKey)
			}
		})
	}
}

func TestKeyFlagHelpNamesTheVariable(t *testing.T) {
	var stdout bytes.Buffer
	if _, code := parseFrontendFlags([]string{"-h"}, Env{Stdout: &stdout, Stderr: &bytes.Buffer{}}); code != ExitOK {
		t.Fatalf("code %d", code)
	}
	for _, v := range []string{envAPIKey, envAdminKey, "-header-timeout", "-request-timeout", "-max-body-bytes"} {
		if !strings.Contains(stdout.String(), v) {
			t.Errorf("help does not mention %s", v)
		}
	}
}

func TestAdminExposedWarning(t *testing.T) {
	tests := []struct {
		addr, apiKey, adminKey string
		want                   bool
	}{
		{"127.0.0.1:8000", "", "", false},
		{"localhost:8000", "", "", false},
		{"[::1]:8000", "", "", false},
		{"0.0.0.0:8000", "", "", true},
		{":8000", "", "", true},
		{"10.1.2.3:8000", "", "", true},
		{"0.0.0.0:8000", "k", "", true}, // the API key is not an admin key
		{"0.0.0.0:8000", "", "a", false},
	}
	for _, tc := range tests {
		c := &node.FrontendConfig{HTTPAddr: tc.addr, APIKey: tc.apiKey, AdminKey: tc.adminKey}
		if got := adminExposed(c); got != tc.want {
			t.Errorf("adminExposed(%q, keys %q/%q) = %v, want %v", tc.addr, tc.apiKey, tc.adminKey, got, tc.want)
		}
		var buf bytes.Buffer
		warnAdminExposed(slog.New(slog.NewTextHandler(&buf, nil)), c)
		if logged := strings.Contains(buf.String(), "--admin-key"); logged != tc.want {
			t.Errorf("%q: warning logged = %v, want %v (%s)", tc.addr, logged, tc.want, buf.String())
		}
	}
}
