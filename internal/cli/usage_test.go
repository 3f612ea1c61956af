package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestUsageErrors: every malformed command line exits 2 with a message
// naming what to fix, before anything runs.
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad size", []string{"linktest", "--bytes", "lots"}, "--bytes"},
		{"too big", []string{"linktest", "--bytes", "2GiB"}, "at most 1GiB"},
		{"zero", []string{"linktest", "--bytes", "0"}, "more than 0"},
		{"bad url", []string{"linktest", "--url", "localhost:8000"}, "--url"},
		{"stray argument", []string{"linktest", "now"}, "unexpected argument"},
		{"bad url", []string{"preflight", "--url", "localhost:8000"}, "--url"},
		{"bad lengths", []string{"preflight", "--prompt-tokens", "1500,x"}, "--prompt-tokens"},
		{"no lengths", []string{"preflight", "--prompt-tokens", ""}, "--prompt-tokens"},
		{"ratio", []string{"preflight", "--min-hit-ratio", "1.5"}, "--min-hit-ratio"},
		{"unknown flag", []string{"preflight", "--fast"}, "unknown flag --fast; see `switchyard preflight --help`"},
		{"stray argument", []string{"preflight", "now"}, "unexpected argument"},
		{"up: no workers", []string{"up", "--workers", "0"}, "--workers"},
		{"up: link rate without prefill", []string{"up", "--link-rate", "1gbit"}, "--prefill-workers"},
		{"worker: bad role", []string{"worker", "--role", "chef"}, "--role"},
		{"bridge: no engine url", []string{"worker", "--engine", "vllm", "--kv-events", "tcp://h:5557", "--nats", "nats://h:4222"}, "--engine-url"},
		{"bridge: no events endpoint", []string{"worker", "--engine", "sglang", "--engine-url", "http://h:8000", "--nats", "nats://h:4222"}, "--kv-events"},
		{"bridge: both endpoints", []string{"worker", "--engine", "vllm", "--engine-url", "http://h:8000", "--kv-events", "tcp://h:5557", "--kv-events-listen", "tcp://0.0.0.0:5557", "--nats", "nats://h:4222"}, "exactly one"},
		{"bridge: no nats", []string{"worker", "--engine", "vllm", "--engine-url", "http://h:8000", "--kv-events", "tcp://h:5557"}, "--nats"},
		{"bridge: bad model config", []string{"worker", "--engine", "vllm", "--engine-url", "http://h:8000", "--kv-events", "tcp://h:5557", "--nats", "nats://h:4222", "--model-config", "/nonexistent/config.json"}, "--model-config"},
		{"worker: unknown engine", []string{"worker", "--engine", "trtllm"}, "want sim, vllm or sglang"},
		{"worker: kv-events not an endpoint", []string{"worker", "--kv-events", "maybe"}, "--kv-events"},
		{"sim wire with nats", []string{"worker", "--kv-events-wire", "vllm", "--nats", "nats://h:4222"}, "stand-alone engine"},
		{"up: bad engine wire", []string{"up", "--engine-wire", "sglang"}, "--engine-wire"},
		{"up: wire quirk without the wire", []string{"up", "--kv-events-parent-zero"}, "add --engine-wire vllm"},
		{"up: drop share above 1", []string{"up", "--engine-wire", "vllm", "--kv-events-drop", "2"}, "drop share 2: want 0..1"},
		{"worker: wire quirk without the wire", []string{"worker", "--kv-events-first-seq", "1"}, "add --kv-events-wire vllm"},
		{"bridge: zero replay buffer", []string{"worker", "--engine", "vllm", "--kv-replay-buffer", "0"}, "--kv-replay-buffer 0: want at least 1"},
		{"worker: negative event batch", []string{"worker", "--kv-events-wire", "vllm", "--kv-events-batch", "-1"}, "want 0 (one batch per step)"},
		{"ceiling: no trace", []string{"ceiling"}, "--trace"},
		{"ceiling: disk without host tier", []string{"ceiling", "--trace", "t.jsonl", "--kv-disk-gib", "1"}, "--kv-offload-gib"},
		{"unknown command", []string{"launch"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(context.Background(), tt.args, nil, &out, &errb)
			if code != ExitUsage || !strings.Contains(errb.String(), tt.want) {
				t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, errb.String(), ExitUsage, tt.want)
			}
		})
	}
}
