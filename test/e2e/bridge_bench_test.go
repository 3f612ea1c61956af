//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/vllmpub"
)

// BenchmarkBridgeMillionBlocks measures the real processes: a frontend and
// `switchyard worker --engine vllm`, fed by a vLLM-wire publisher in this
// process. It reports end-to-end blocks/s from the engine's PUB socket to
// the frontend's index (the frontend's /health block count) and the
// bridge's RSS with 1M blocks mirrored, for an engine that reports its KV
// capacity on /metrics (the bridge sizes its mirror from it) and for one
// that does not (the mirror grows). Run it alone:
//
//	go test -tags e2e -run '^$' -bench BridgeMillionBlocks -benchtime 1x ./test/e2e/
func BenchmarkBridgeMillionBlocks(b *testing.B) {
	for _, c := range []struct {
		name    string
		metrics string
	}{
		// An engine whose GPU holds 1.1M blocks.
		{"capacity", "vllm:num_requests_running 0\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1100000\"} 1\nprocess_start_time_seconds 1764000000\n"},
		{"no-capacity", "vllm:num_requests_running 0\nprocess_start_time_seconds 1764000000\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchBridgeMillionBlocks(b, c.metrics)
			}
		})
	}
}

func benchBridgeMillionBlocks(b *testing.B, engineMetrics string) {
	const total, perBatch = 1 << 20, 64
	login := newNATSLogin(b)
	p, m := start(b, readyURL, "frontend", "--http-addr", "127.0.0.1:0", "--nats-addr", "127.0.0.1:0", "--registry-ttl", "2s",
		"--nats-secret-file", login.secretFile, "--log-level", "warn")
	url := m[1]
	var natsURL string
	eventually(b, 10*time.Second, "the frontend's NATS URL", func() bool {
		if mm := natsLine.FindStringSubmatch(p.output()); mm != nil {
			natsURL = mm[1]
		}
		return natsURL != ""
	})
	engine := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(rw, `{"data":[{"id":"qwen3-0.6b","max_model_len":40960}]}`)
		case "/metrics":
			fmt.Fprint(rw, engineMetrics)
		}
	}))
	defer engine.Close()
	ep, rep := freeTCP(b), freeTCP(b)
	pub, err := vllmpub.New(vllmpub.Config{Endpoint: ep, ReplayEndpoint: rep, BlockSize: 16, BufferSteps: total / perBatch})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	br, _ := start(b, readyURL, append([]string{"worker", "--engine", "vllm", "--id", "vllm-a", "--engine-url", engine.URL,
		"--kv-events", ep, "--kv-replay", rep, "--nats", natsURL, "--registry-ttl", "2s", "--log-level", "warn"}, login.workerArgs(b, "vllm-a")...)...)
	blocks := func() int {
		var h struct {
			Workers []struct {
				Events struct {
					State  string `json:"state"`
					Blocks int    `json:"blocks"`
				} `json:"events"`
			} `json:"workers"`
		}
		getJSON(b, url+"/health", &h)
		if len(h.Workers) != 1 || h.Workers[0].Events.State != "healthy" {
			return -1
		}
		return h.Workers[0].Events.Blocks
	}
	eventually(b, 20*time.Second, "the bridged worker healthy", func() bool { return blocks() >= 0 })

	idleRSS := vmRSS(b, br.cmd.Process.Pid)
	toks := make([]uint32, perBatch*16)
	hashes := make([]uint64, perBatch)
	b.ResetTimer()
	t0 := time.Now()
	for n := 0; n < total; n += perBatch {
		for j := range toks {
			toks[j] = uint32(n*16 + j)
		}
		hashes = kvindex.HashChain(hashes[:0], "", toks, 16)
		pub.PublishStepTokens([]kvevents.Event{{Kind: kvevents.Stored, Parent: kvindex.Root(""), Hashes: hashes}}, &sim.StepTokens{Tokens: toks})
	}
	published := time.Since(t0)
	eventually(b, 5*time.Minute, "1M blocks in the frontend's index", func() bool { return blocks() >= total })
	elapsed := time.Since(t0)
	b.StopTimer()
	rss := vmRSS(b, br.cmd.Process.Pid)
	b.ReportMetric(float64(total)/elapsed.Seconds(), "blocks/s")
	b.ReportMetric(float64(rss)/(1<<20), "bridge-RSS-MiB")
	b.Logf("1M blocks: published in %v, in the frontend's index after %v; bridge RSS %.1f MiB (%.1f MiB before the first block); dropped at the PUB queue %d",
		published.Round(time.Millisecond), elapsed.Round(time.Millisecond), float64(rss)/(1<<20), float64(idleRSS)/(1<<20), pub.Dropped())
}

func freeTCP(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "tcp://" + ln.Addr().String()
}

// vmRSS reads a process's resident set size in bytes.
func vmRSS(t testing.TB, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}
