package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestBenchUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no scenario", []string{"bench"}, "name a scenario"},
		{"unknown scenario", []string{"bench", "fast"}, "unknown scenario"},
		{"bad url", []string{"bench", "routing", "--url", "localhost"}, "--url"},
		{"trace without file", []string{"bench", "trace"}, "--trace"},
		{"bad sizes", []string{"bench", "disagg", "--prompt-tokens", "5,x"}, "--prompt-tokens"},
		{"both prefix flags", []string{"bench", "routing", "--prefix-words", "10", "--prefix-tokens", "10"}, "not both"},
		{"plot not png", []string{"bench", "routing", "--plot", "out.svg"}, ".png"},
		{"zero concurrency", []string{"bench", "routing", "--concurrency", "0"}, "--concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), tt.args, nil, &out, &errb)
			if code != ExitUsage || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), ExitUsage, tt.want)
			}
		})
	}
}

func TestBenchUnreachableIsRuntimeFailure(t *testing.T) {
	var out, errb bytes.Buffer
	// Port 1 on loopback refuses connections.
	code := Main(context.Background(), []string{"bench", "routing", "--url", "http://127.0.0.1:1", "--requests", "1"}, nil, &out, &errb)
	if code != ExitFail || !strings.Contains(errb.String(), "is the frontend running") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

func TestBenchSelftestCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"bench", "selftest", "--requests", "300", "--concurrency", "8"}, nil, &out, &errb)
	if code != ExitOK || !strings.Contains(out.String(), "streamed requests/s") {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
}
