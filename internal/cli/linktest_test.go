package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/bus/bustest"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
	"github.com/switchyard-llm/switchyard/internal/node"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "256MiB", want: 256 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "64MB", want: 64e6},
		{in: "64mb", want: 64e6},
		{in: "1.5GB", want: 1.5e9},
		{in: "512KiB", want: 512 << 10},
		{in: "4096", want: 4096},
		{in: "10 MiB", want: 10 << 20},
		{in: "100B", want: 100},
		{in: "MiB", bad: true},
		{in: "12XB", bad: true},
		{in: "1.5B", bad: true},
		{in: "", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSize(tt.in)
			if tt.bad {
				if err == nil {
					t.Errorf("parseSize(%q) = %d, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("parseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

// startLinkCluster runs a real deployment in-process: embedded NATS, a
// frontend, one prefill worker whose KV transfer server is shaped to rate,
// and one decode worker.
func startLinkCluster(t testing.TB, rate linkemu.Rate, adminKey string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nc := bustest.Connect(t, bustest.Server(t, bus.EmbeddedConfig{Host: "127.0.0.1", Port: -1}).ClientURL())
	subj, err := bus.NewSubjects("linktest")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fe, err := node.StartFrontend(ctx, node.FrontendConfig{HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj,
		Model: "qwen3-0.6b", BlockSize: 16, Disagg: "auto", AdminKey: adminKey, LinkLabel: rate.String(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fe.Close() })
	for _, s := range []struct{ id, role string }{{"prefill-1", bus.RolePrefill}, {"decode-1", bus.RoleDecode}} {
		wc := node.WorkerConfig{HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, Logger: log,
			Sim: sim.Config{ID: s.id, Role: s.role, Model: "qwen3-0.6b", GPU: "rtx-4060", BlockSize: 16,
				GPUMemoryUtilization: 0.9, MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, Speedup: 1}}
		if s.role == bus.RolePrefill {
			wc.LinkRate = rate
		}
		w, err := node.StartWorker(ctx, wc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close() })
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := fe.WaitWorkers(wctx, 2); err != nil {
		t.Fatal(err)
	}
	return fe.URL()
}

func TestLinktestMeasuresEmulatedLink(t *testing.T) {
	rate, err := linkemu.ParseRate("1gbit")
	if err != nil {
		t.Fatal(err)
	}
	url := startLinkCluster(t, rate, "sekret")

	t.Run("every pair, JSON", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"linktest", "--url", url, "--admin-key", "sekret", "--bytes", "16MiB", "--json", "-"}, nil, &out, &errb)
		if code != ExitOK {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
		}
		var got struct {
			Results []linkResult `json:"results"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("stdout is not JSON: %v\n%s", err, out.String())
		}
		if len(got.Results) != 1 {
			t.Fatalf("%d results, want 1 (one prefill → decode pair): %+v", len(got.Results), got.Results)
		}
		r := got.Results[0]
		if r.From != "prefill-1" || r.To != "decode-1" || r.Bytes != 16<<20 || r.Emulated == "" {
			t.Errorf("result %+v", r)
		}
		// The token bucket caps the rate at 125 MB/s (plus its burst over a
		// 16 MiB transfer); a noisy machine can only make it slower, so the
		// lower bound is loose.
		if mbs := r.BytesPerSec / 1e6; mbs < 20 || mbs > 140 {
			t.Errorf("measured %.1f MB/s on a 1 Gbit/s emulated link, want 20..140", mbs)
		}
	})

	t.Run("named pair, table", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"linktest", "--url", url, "--admin-key", "sekret",
			"--from", "prefill-1", "--to", "decode-1", "--bytes", "4MB"}, nil, &out, &errb)
		if code != ExitOK {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
		}
		for _, want := range []string{"MB/s", "prefill-1", "decode-1", "4MB", rate.String()} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("table lacks %q:\n%s", want, out.String())
			}
		}
	})

	t.Run("unknown worker fails", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"linktest", "--url", url, "--admin-key", "sekret",
			"--from", "prefill-9", "--to", "decode-1", "--bytes", "1MB"}, nil, &out, &errb)
		if code != ExitFail || !strings.Contains(out.String(), "FAILED") {
			t.Errorf("exit %d, want %d\nstdout %s\nstderr %s", code, ExitFail, out.String(), errb.String())
		}
	})

	t.Run("no pair matches", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"linktest", "--url", url, "--admin-key", "sekret", "--to", "decode-7"}, nil, &out, &errb)
		if code != ExitFail || !strings.Contains(errb.String(), "no prefill → decode pair") {
			t.Errorf("exit %d, stderr %q", code, errb.String())
		}
	})

	t.Run("wrong admin key", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := Main(context.Background(), []string{"linktest", "--url", url, "--admin-key", "wrong"}, nil, &out, &errb)
		if code != ExitFail || !strings.Contains(errb.String(), "--admin-key") {
			t.Errorf("exit %d, stderr %q", code, errb.String())
		}
	})
}
