package cli

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStartupFailuresSayWhatToDo runs each command with a start-up mistake a
// new user makes and checks that it exits non-zero with one line that names
// the fault and the fix: no panic, no stack trace, nothing started first.
func TestStartupFailuresSayWhatToDo(t *testing.T) {
	t.Setenv(envAPIKey, "")
	t.Setenv(envAdminKey, "")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { taken.Close() })
	busy := taken.Addr().String()

	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string // in the one line printed
	}{
		{"up, http port taken", []string{"up", "--http-addr", busy}, ExitFail, "pick another --http-addr"},
		{"frontend, http port taken", []string{"frontend", "--http-addr", busy, "--nats-addr", "127.0.0.1:0"}, ExitFail, "pick another --http-addr"},
		{"frontend, nats port taken", []string{"frontend", "--http-addr", "127.0.0.1:0", "--nats-addr", busy}, ExitFail, "pick another with --nats-addr"},
		{"worker, http port taken", []string{"worker", "--http-addr", busy}, ExitFail, "pick another --http-addr"},
		{"up, unknown router", []string{"up", "--router", "fastest"}, ExitUsage, `--router "fastest": want kv, round-robin, random or least-loaded`},
		{"frontend, unknown router", []string{"frontend", "--router", "fastest"}, ExitUsage, `--router "fastest"`},
		{"up, negative alpha", []string{"up", "--router-alpha", "-1"}, ExitUsage, "--router-alpha -1"},
		{"up, unknown disagg mode", []string{"up", "--disagg", "sometimes"}, ExitUsage, `--disagg "sometimes": want never, always or auto`},
		{"up, margin of 1", []string{"up", "--disagg-margin", "1"}, ExitUsage, "--disagg-margin 1"},
		{"up, port out of range", []string{"up", "--http-addr", "127.0.0.1:99999"}, ExitUsage, `--http-addr "127.0.0.1:99999": port "99999" is not in 0..65535`},
		{"up, no port", []string{"up", "--http-addr", "localhost"}, ExitUsage, `--http-addr "localhost": want host:port`},
		{"up, nats port out of range", []string{"up", "--nats-addr", "127.0.0.1:70000"}, ExitUsage, `--nats-addr "127.0.0.1:70000"`},
		{"frontend, port out of range", []string{"frontend", "--http-addr", "127.0.0.1:99999"}, ExitUsage, "port \"99999\""},
		{"worker, port out of range", []string{"worker", "--http-addr", "127.0.0.1:99999"}, ExitUsage, "port \"99999\""},
		{"up, unknown model", []string{"up", "--model", "gpt-4"}, ExitUsage, `--model "gpt-4" is not a simulator preset: pick one of llama-2-70b, `},
		{"worker, unknown model", []string{"worker", "--model", "gpt-4"}, ExitUsage, `--model "gpt-4" is not a simulator preset`},
		{"up, unknown gpu", []string{"up", "--gpu", "tpu"}, ExitUsage, `--gpu "tpu" is not a simulator preset: pick one of`},
		{"up, bad tp", []string{"up", "--tp", "3"}, ExitUsage, "--tp 3: want 1, 2, 4 or 8"},
		{"up, two bad engine flags", []string{"up", "--tp", "3", "--kv-blocks", "-1"}, ExitUsage, "--tp 3"},
		{"up, memory share above 1", []string{"up", "--gpu-memory-utilization", "2"}, ExitUsage, "--gpu-memory-utilization 2: want a share in (0, 1]"},
		{"up, zero speedup", []string{"up", "--speedup", "0"}, ExitUsage, "--speedup 0: want more than 0"},
		{"worker, zero speedup", []string{"worker", "--speedup", "0"}, ExitUsage, "--speedup 0"},
		{"up, zero registry ttl", []string{"up", "--registry-ttl", "0s"}, ExitUsage, "--registry-ttl 0s: want more than 0"},
		{"frontend, zero registry ttl", []string{"frontend", "--registry-ttl", "0s"}, ExitUsage, "--registry-ttl 0s"},
		{"up, model too big for the gpu", []string{"up", "--model", "llama-3.1-70b", "--gpu", "rtx-4060", "--tp", "1"}, ExitUsage, "raise --tp or --gpu-memory-utilization, or set --kv-blocks"},
		{"up, negative kv blocks", []string{"up", "--kv-blocks", "-1"}, ExitUsage, "--kv-blocks -1: want 0 (from GPU memory) or more"},
		{"up, bad log level", []string{"up", "--log-level", "loud"}, ExitUsage, `--log-level "loud": want debug, info, warn or error`},
		{"up, no workers", []string{"up", "--workers", "0"}, ExitUsage, "--workers 0: need at least one"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			code := Main(ctx, tc.args, strings.NewReader(""), &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d", code, tc.wantCode)
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(lines) != 1 {
				t.Errorf("stderr has %d lines, want exactly one:\n%s", len(lines), stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.want)
			}
			if !strings.HasPrefix(stderr.String(), "switchyard "+tc.args[0]+": ") {
				t.Errorf("stderr %q does not start with the command's prefix", stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing: a failed start must not claim readiness", stdout.String())
			}
		})
	}
}

// TestMissingNATSNamedAtOnce: a NATS server that is not there is named on
// stderr while the connection retries, not only when it gives up.
func TestMissingNATSNamedAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
	defer cancel()
	var notice syncBuffer
	if _, err := connectBus(ctx, &notice, url, "test-worker"); err == nil {
		t.Fatal("connected to nothing")
	}
	if s := notice.String(); !strings.Contains(s, "not answering") || !strings.Contains(s, ln.Addr().String()) {
		t.Errorf("notice %q; want it to name %s as not answering", s, url)
	}
}

// TestUpWarnsAlwaysWithoutPrefill: --disagg always with no prefill worker
// to send prefills to is a warning, not silence.
func TestUpWarnsAlwaysWithoutPrefill(t *testing.T) {
	var stderr bytes.Buffer
	if _, code := parseUpFlags([]string{"--disagg", "always"}, Env{Stdout: &bytes.Buffer{}, Stderr: &stderr}); code != -1 || !strings.Contains(stderr.String(), "--prefill-workers") {
		t.Errorf("code %d, stderr %q; want a warning naming --prefill-workers", code, stderr.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the notifier goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
