//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// debianPython is the interpreter whose python3-zmq and python3-msgpack
// .ci/run installs; a python3 earlier on PATH (pyenv) may lack them.
const debianPython = "/usr/bin/python3"

// TestVLLMWireFromLibzmq publishes KV events from real libzmq in vLLM
// 0.26's layout (testdata/vllm_libzmq_engine.py) and checks that the
// bridge, started as `switchyard worker --engine vllm`, puts exactly the
// frontend's own hashes for the engine's tokens into the index: half the
// batches arrive by replay (published before the bridge connected), half
// live; hashes as ints and as bin; one chain salted.
func TestVLLMWireFromLibzmq(t *testing.T) { libzmqWire(t, "", 0) }

// TestThirdPartyWireFromLibzmq is the same through real libzmq in the
// third-party engine's layout: tagged arrays with parent_block_hash 0 for
// root blocks, batches numbered from 1, hashes above 2^63, token ids above
// 2^31.
func TestThirdPartyWireFromLibzmq(t *testing.T) { libzmqWire(t, "third-party", 1<<31) }

// libzmqWire runs vllm_libzmq_engine.py with the argument wire (its token
// ids start at tokenBase) behind a bridge process.
func libzmqWire(t *testing.T, wire string, tokenBase int) {
	if out, err := exec.Command(debianPython, "-c", "import zmq, msgpack").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import zmq and msgpack (%v: %s): install Debian's python3-zmq and python3-msgpack (apt-get install python3-zmq python3-msgpack; .ci/run does)",
			debianPython, err, strings.TrimSpace(string(out)))
	}
	login := newNATSLogin(t)
	_, url, natsURL := startAuthFrontend(t, login)

	args := []string{"testdata/vllm_libzmq_engine.py"}
	if wire != "" {
		args = append(args, wire)
	}
	eng := exec.Command(debianPython, args...)
	stdin, _ := eng.StdinPipe()
	stdout, _ := eng.StdoutPipe()
	var stderr strings.Builder
	eng.Stderr = &stderr
	if err := eng.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		eng.Process.Kill()
		eng.Wait()
		if t.Failed() {
			t.Logf("engine stderr:\n%s", stderr.String())
		}
	})
	lines := bufio.NewScanner(stdout)
	readLine := func() string {
		t.Helper()
		got := make(chan string, 1)
		go func() {
			if lines.Scan() {
				got <- lines.Text()
			}
			close(got)
		}()
		select {
		case l, ok := <-got:
			if !ok {
				t.Fatalf("engine exited: %s", stderr.String())
			}
			return l
		case <-time.After(30 * time.Second):
			t.Fatalf("engine silent for 30 s: %s", stderr.String())
		}
		return ""
	}
	m := regexp.MustCompile(`engine: http=(\d+) pub=(\S+) replay=(\S+)`).FindStringSubmatch(readLine())
	if m == nil {
		t.Fatalf("engine did not announce its endpoints")
	}
	br, _ := start(t, readyURL, append([]string{"worker", "--engine", "vllm", "--id", "vllm-a",
		"--engine-url", "http://127.0.0.1:" + m[1], "--kv-events", m[2], "--kv-replay", m[3],
		"--nats", natsURL, "--registry-ttl", "2s"}, login.workerArgs(t, "vllm-a")...)...)
	fmt.Fprintln(stdin, "go")
	if l := readLine(); l != "engine: published" {
		t.Fatalf("engine said %q", l)
	}

	lookup := func(c int) int {
		toks := make([]int, 4*16)
		for i := range toks {
			toks[i] = tokenBase + c*100000 + i
		}
		body := map[string]any{"prompt": toks}
		if c == 1 {
			body["cache_salt"] = "tenant-b"
		}
		b, _ := json.Marshal(body)
		resp, err := http.Post(url+"/admin/lookup", "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Overlaps map[string]int `json:"overlaps"`
		}
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil {
			t.Fatalf("lookup: %d %s", resp.StatusCode, data)
		}
		return out.Overlaps["vllm-a"]
	}
	eventually(t, 20*time.Second, "all six chains indexed under the frontend's hashes", func() bool {
		for c := range 6 {
			if lookup(c) != 4 {
				return false
			}
		}
		return true
	})
	// The salt is part of the key: chain 1's tokens without it match nothing.
	toks := make([]int, 64)
	for i := range toks {
		toks[i] = tokenBase + 100000 + i
	}
	b, _ := json.Marshal(map[string]any{"prompt": toks})
	resp, err := http.Post(url+"/admin/lookup", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(data), `"vllm-a":`) && !strings.Contains(string(data), `"vllm-a":0`) {
		t.Errorf("unsalted lookup of a salted chain matched: %s", data)
	}
	var h struct {
		Workers []struct {
			ID     string `json:"id"`
			Events struct {
				State string `json:"state"`
				Epoch uint64 `json:"epoch"`
			} `json:"events"`
		} `json:"workers"`
	}
	getJSON(t, url+"/health", &h)
	if len(h.Workers) != 1 || h.Workers[0].ID != "vllm-a" || h.Workers[0].Events.State != "healthy" {
		t.Errorf("/health workers = %+v, want vllm-a healthy", h.Workers)
	}

	// The bridge is killed (no deregistration) and started again: it
	// rebuilds its mirror from the engine's replay buffer, and the worker is
	// back in sync under a new epoch.
	oldEpoch := h.Workers[0].Events.Epoch
	br.kill()
	start(t, readyURL, append([]string{"worker", "--engine", "vllm", "--id", "vllm-a",
		"--engine-url", "http://127.0.0.1:" + m[1], "--kv-events", m[2], "--kv-replay", m[3],
		"--nats", natsURL, "--registry-ttl", "2s"}, login.workerArgs(t, "vllm-a")...)...)
	eventually(t, 20*time.Second, "the restarted bridge healthy with every chain", func() bool {
		getJSON(t, url+"/health", &h)
		if len(h.Workers) != 1 || h.Workers[0].Events.State != "healthy" || h.Workers[0].Events.Epoch == oldEpoch {
			return false
		}
		for c := range 6 {
			if lookup(c) != 4 {
				return false
			}
		}
		return true
	})
}
