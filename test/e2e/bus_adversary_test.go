//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
)

// startConfiguredNATS runs an external nats-server whose authorization
// block is what `switchyard nats-config` prints for workers ids, and
// returns its URL (no credentials in it). The server is killed at cleanup.
func startConfiguredNATS(t *testing.T, l *natsLogin, ids string) string {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		t.Fatal("nats-server not found in PATH: this test needs a real external NATS server (Debian: apt-get install nats-server; .ci/run installs it)")
	}
	var conf bytes.Buffer
	cmd := exec.Command(binary(t), "nats-config", "--secret-file", l.secretFile, "--workers", ids)
	cmd.Stdout = &conf
	if err := cmd.Run(); err != nil {
		t.Fatalf("nats-config: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n%s", port, filepath.Join(dir, "js"), conf.String())
	cfgFile := filepath.Join(dir, "nats.conf")
	os.WriteFile(cfgFile, []byte(cfg), 0o600)
	srv := exec.Command("nats-server", "-c", cfgFile)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	srv.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-srv.Process.Pid, syscall.SIGKILL)
		srv.Wait()
		if t.Failed() {
			t.Logf("nats-server output:\n%s", srvOut.String())
		}
	})
	eventually(t, 15*time.Second, "nats-server accepts connections", func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return "nats://127.0.0.1:" + strconv.Itoa(port)
}

// busRig is a deployment on an authenticated bus: a frontend sharing
// routing state (as replicas do) and sim workers, each logged in with its
// own credentials, on the frontend's embedded NATS or on an external
// nats-server configured by `switchyard nats-config`.
type busRig struct {
	l       *natsLogin
	fe      *proc
	url     string // the frontend's HTTP URL
	natsURL string
}

func newBusRig(t *testing.T, external bool, workers ...string) *busRig {
	t.Helper()
	r := &busRig{l: newNATSLogin(t)}
	natsURL := ""
	if external {
		natsURL = startConfiguredNATS(t, r.l, "w1,w2,w3,w4")
	}
	r.fe, r.url, r.natsURL = startFrontend(t, r.l, natsURL, "--log-level", "info")
	for _, id := range workers {
		start(t, readyURL, append([]string{"worker", "--nats", r.natsURL, "--id", id, "--http-addr", "127.0.0.1:0", "--registry-ttl", "2s"},
			r.l.workerArgs(t, id)...)...)
	}
	eventually(t, 20*time.Second, "every worker in /health", func() bool {
		var h healthWorkers
		if getJSON(t, r.url+"/health", &h) != 200 {
			return false
		}
		for _, id := range workers {
			if !h.has(id) {
				return false
			}
		}
		return true
	})
	return r
}

// as connects with worker id's real credentials, as a compromised worker
// (or anyone holding its password) would.
func (r *busRig) as(t *testing.T, id string) *nats.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	user := bus.WorkerUser(id)
	nc, err := bus.Connect(ctx, r.natsURL, "attacker", nats.UserInfo(user, bus.Password(r.l.secret, user)),
		nats.CustomInboxPrefix(bus.WorkerInboxPrefix(id)), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

type healthLoads struct {
	Policy  string `json:"policy"`
	Workers []struct {
		ID   string `json:"id"`
		Load struct {
			Running int `json:"running"`
		} `json:"load"`
	} `json:"workers"`
}

// TestWorkerCannotSpeakForOthers replays the bus-adversary probe with
// worker w3's real credentials, against the embedded server and against an
// external nats-server configured by nats-config:
//   - reflection: w3 stores a replica-settings message as its registry
//     value and has JetStream deliver it (a direct get) to the frontends'
//     subject, and aims JetStream and registrar answers at w2's load and
//     event subjects and registry key;
//   - load spoofing: w3 publishes, on its own load subject, reports naming
//     w2 as overloaded.
//
// Throughout a 3 s window the frontend must keep its policy, never see
// w2's forged load, and keep w2 registered.
func TestWorkerCannotSpeakForOthers(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded", true: "external nats-server"}[external], func(t *testing.T) {
			r := newBusRig(t, external, "w2", "w3")
			var before healthLoads
			getJSON(t, r.url+"/health", &before)
			nc := r.as(t, "w3")
			subj, _ := bus.NewSubjects("default")
			bucket := subj.WorkersBucket()
			stream := "KV_" + bucket
			poison := []byte(`{"replica":"x","epoch":1,"seq":1,"settings":{"policy":"random","version":9223372036854775807,"by":"zzzz"}}`)
			spoof := []byte(`{"worker_id":"w2","running":5000,"waiting":5000,"kv_usage":1}`)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for {
					nc.Publish("$KV."+bucket+".w3", poison)
					for _, to := range []string{subj.Replicas(), subj.Load("w2"), subj.KVEvents("w2"), "$KV." + bucket + ".w2"} {
						nc.PublishRequest("$JS.API.DIRECT.GET."+stream+".$KV."+bucket+".w3", to, nil)
						nc.PublishRequest("$JS.API.DIRECT.GET."+stream, to, []byte(`{"last_by_subj":"$KV.`+bucket+`.w3"}`))
						nc.PublishRequest("$KV."+bucket+".w3", to, poison)
						nc.PublishRequest(subj.Registrar("w3"), to, []byte(`{"op":"get","id":"w3"}`))
					}
					nc.Publish(subj.Load("w3"), spoof)
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
				}
			}()
			// Observation window: the attack runs throughout, and every
			// look at /health must show the truth.
			forgedLoad, policyFlips, w2Gone, looks := 0, 0, 0, 0
			for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				var h healthLoads
				getJSON(t, r.url+"/health", &h)
				looks++
				if h.Policy != before.Policy {
					policyFlips++
				}
				seen := false
				for _, w := range h.Workers {
					if w.ID == "w2" {
						seen = true
						if w.Load.Running >= 5000 {
							forgedLoad++
						}
					}
				}
				if !seen {
					w2Gone++
				}
			}
			cancel()
			wg.Wait()
			if policyFlips > 0 {
				t.Errorf("the frontend's policy left %q in %d of %d looks: a worker changed routing settings", before.Policy, policyFlips, looks)
			}
			if forgedLoad > 0 {
				t.Errorf("w2 showed w3's forged load in %d of %d looks", forgedLoad, looks)
			}
			if w2Gone > 0 {
				t.Errorf("w2 was missing from /health in %d of %d looks: w3 overwrote its registry entry", w2Gone, looks)
			}
			if code, body := postJSON(t, r.url+"/v1/completions", `{"model":"qwen3-0.6b","prompt":"after the attack","max_tokens":2}`); code != 200 {
				t.Errorf("completion after the attack: %d %s", code, body)
			}
			if m := metric(t, r.url, "switchyard_bus_load_reports_rejected_total"); m < 1 {
				t.Errorf("switchyard_bus_load_reports_rejected_total = %v, want the forged reports counted", m)
			}
		})
	}
}

// TestUnauthenticatedBusRefused: on an external nats-server that admits
// anyone (where one stranger registered a worker and captured 18 of 20
// prompts), the frontend and a worker refuse to start and say what to do;
// with --nats-insecure they run, and warn that they do.
func TestUnauthenticatedBusRefused(t *testing.T) {
	ns := startNATS(t)
	for _, args := range [][]string{
		{"frontend", "--http-addr", "127.0.0.1:0", "--nats", ns.URL()},
		{"worker", "--id", "w1", "--http-addr", "127.0.0.1:0", "--nats", ns.URL()},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, binary(t), args...).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), "without credentials") || !strings.Contains(string(out), "--nats-insecure") {
			t.Errorf("%s on an open bus: err %v, output:\n%s\nwant a refusal that names --nats-insecure", args[0], err, out)
		}
	}
	fe, m := start(t, readyURL, "frontend", "--http-addr", "127.0.0.1:0", "--nats", ns.URL(), "--nats-insecure")
	w, _ := start(t, readyURL, "worker", "--id", "w1", "--http-addr", "127.0.0.1:0", "--nats", ns.URL(), "--nats-insecure")
	eventually(t, 20*time.Second, "w1 in /health", func() bool {
		var h healthWorkers
		return getJSON(t, m[1]+"/health", &h) == 200 && h.has("w1")
	})
	for _, p := range []*proc{fe, w} {
		if out := p.output(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "without credentials (--nats-insecure)") {
			t.Errorf("a process on an open bus with --nats-insecure did not warn:\n%s", out)
		}
	}
}

type healthEvents struct {
	Workers []struct {
		ID     string `json:"id"`
		Events struct {
			State            string `json:"state"`
			Epoch            uint64 `json:"epoch"`
			Resyncs          uint64 `json:"resyncs"`
			ImplausibleEpoch uint64 `json:"implausible_epoch"`
			ResyncFailures   uint64 `json:"resync_failures"`
		} `json:"events"`
	} `json:"workers"`
}

// TestPoisonedEpoch replays the probe's poisoned batch with w3's real
// credentials, on w3's own KV subject: one batch with epoch 2^64-2 made the
// frontend resync w3 17,609 times in 20 s at 64% of a core, and w3 stayed
// resyncing. The epoch is not the registry's, so the batch is counted and
// ignored: no resync follows and w3 stays healthy.
func TestPoisonedEpoch(t *testing.T) {
	for _, external := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded", true: "external nats-server"}[external], func(t *testing.T) {
			r := newBusRig(t, external, "w3")
			w3 := func() (state string, resyncs, implausible uint64) {
				var h healthEvents
				getJSON(t, r.url+"/health", &h)
				for _, w := range h.Workers {
					if w.ID == "w3" {
						return w.Events.State, w.Events.Resyncs, w.Events.ImplausibleEpoch
					}
				}
				return "", 0, 0
			}
			eventually(t, 15*time.Second, "w3's events healthy", func() bool { s, _, _ := w3(); return s == "healthy" })
			_, before, _ := w3()
			nc := r.as(t, "w3")
			subj, _ := bus.NewSubjects("default")
			b := kvevents.Batch{WorkerID: "w3", Epoch: math.MaxUint64 - 1, Seq: 1, UnixNano: time.Now().UnixNano()}
			if err := nc.Publish(subj.KVEvents("w3"), kvevents.AppendBatch(nil, &b)); err != nil {
				t.Fatal(err)
			}
			nc.Flush()
			eventually(t, 10*time.Second, "the poisoned batch counted", func() bool { _, _, n := w3(); return n >= 1 })
			// Observation window: a resync loop shows in it.
			time.Sleep(2 * time.Second)
			state, after, _ := w3()
			if state != "healthy" || after != before {
				t.Errorf("after the poisoned batch: w3 %s with %d resyncs (had %d); want healthy with none more", state, after, before)
			}
		})
	}
}
