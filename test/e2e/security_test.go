//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	be "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// natsLogin is a deployment secret in a file, and each worker's password
// derived from it in a file of its own, as an operator would hand them out.
type natsLogin struct {
	dir, secretFile string
	secret          []byte
}

func newNATSLogin(t testing.TB) *natsLogin {
	t.Helper()
	raw := make([]byte, 32)
	rand.Read(raw)
	l := &natsLogin{dir: t.TempDir(), secret: []byte(hex.EncodeToString(raw))}
	l.secretFile = filepath.Join(l.dir, "secret")
	if err := os.WriteFile(l.secretFile, l.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// passwordFile writes user's password and returns its path.
func (l *natsLogin) passwordFile(t testing.TB, user string) string {
	t.Helper()
	p := filepath.Join(l.dir, strings.ReplaceAll(user, ":", "_")+".password")
	if err := os.WriteFile(p, []byte(bus.Password(l.secret, user)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// workerArgs are worker id's login flags.
func (l *natsLogin) workerArgs(t testing.TB, id string) []string {
	return []string{"--nats-password-file", l.passwordFile(t, bus.WorkerUser(id))}
}

var natsLine = regexp.MustCompile(`nats: ((?:nats|tls)://\S+)`)

// startAuthFrontend runs a frontend whose embedded NATS requires logins.
func startAuthFrontend(t *testing.T, l *natsLogin, args ...string) (p *proc, url, natsURL string) {
	t.Helper()
	p, m := start(t, readyURL, append([]string{"frontend", "--http-addr", "127.0.0.1:0", "--nats-addr", "127.0.0.1:0",
		"--nats-secret-file", l.secretFile, "--registry-ttl", "2s"}, args...)...)
	url = m[1]
	if mm := natsLine.FindStringSubmatch(p.output()); mm != nil {
		natsURL = mm[1]
	} else {
		t.Fatalf("frontend printed no NATS URL:\n%s", p.output())
	}
	return p, url, natsURL
}

type healthWorkers struct {
	Status  string `json:"status"`
	Workers []struct {
		ID  string `json:"id"`
		URL string `json:"url"`
	} `json:"workers"`
	Refused []struct {
		ID     string `json:"id"`
		Reason string `json:"reason"`
	} `json:"refused"`
}

func (h healthWorkers) has(id string) bool {
	for _, w := range h.Workers {
		if w.ID == id {
			return true
		}
	}
	return false
}

// workerRegistry connects to url with worker id's credentials, as a forger
// holding them would, and opens the registry (default namespace) on that
// connection, closed when the test ends.
func workerRegistry(ctx context.Context, t *testing.T, l *natsLogin, url, id string, trust nats.Option) (*nats.Conn, *bus.Registry) {
	t.Helper()
	user := bus.WorkerUser(id)
	nc, err := bus.Connect(ctx, url, "forger", trust, nats.UserInfo(user, bus.Password(l.secret, user)),
		nats.CustomInboxPrefix(bus.WorkerInboxPrefix(id)), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	subj, _ := bus.NewSubjects("default")
	reg, err := bus.OpenRegistry(ctx, bus.RegistryConfig{NC: nc, Subjects: subj, ViaFrontend: true, WorkerID: id})
	if err != nil {
		t.Fatalf("%s opens the registry: %v", id, err)
	}
	return nc, reg
}

// fakeWorkerEntry is a registry entry for a worker that only a forger
// would register: its URL is a server the test owns.
func fakeWorkerEntry(id, url string) bus.WorkerInfo {
	return bus.WorkerInfo{ID: id, Role: bus.RoleAggregated, Model: "qwen3-0.6b", HTTPURL: url, BlockSize: 16,
		KVBytesPerToken: 114688, KVBlocks: 1000, MaxModelLen: 40960}
}

// TestFakeWorkerRegistration replays the field finding — a client with no
// credentials registered a fake worker and received client prompts —
// against a real frontend process with its embedded NATS: without
// credentials the client cannot connect; with worker w1's, it can register
// only w1 (registering w2, or publishing w2's load and events, is refused
// by the server's permissions); and a real worker process with its own
// password joins and serves.
func TestFakeWorkerRegistration(t *testing.T) {
	l := newNATSLogin(t)
	// The embedded server serves TLS too, as a multi-host deployment's
	// would: logins must not cross the network in clear.
	caFile, certFile, keyFile := writeServerPKI(t, t.TempDir())
	fe, url, natsURL := startAuthFrontend(t, l, "--nats-tls-cert", certFile, "--nats-tls-key", keyFile, "--nats-ca", caFile)
	trust := nats.RootCAs(caFile)
	if strings.Contains(fe.output(), string(l.secret)) {
		t.Errorf("the frontend printed the NATS secret")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// 1. No credentials: refused at connect.
	if nc, err := bus.Connect(ctx, natsURL, "anonymous", trust); err == nil {
		nc.Close()
		t.Fatal("a client without credentials connected to the frontend's NATS")
	} else {
		t.Logf("anonymous client: %v", err)
	}

	// 2. Worker w1's credentials: w1 may register, w2 may not.
	nc, reg := workerRegistry(ctx, t, l, natsURL, "w1", trust)
	bait, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bait.Close()
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second) // a refused publish is never acknowledged
	_, err = reg.Register(rctx, fakeWorkerEntry("w2", "http://"+bait.Addr().String()))
	rcancel()
	if err == nil {
		t.Errorf("w1's credentials registered worker w2")
	} else {
		t.Logf("w1 registering as w2: %v", err)
	}
	subj, _ := bus.NewSubjects("default")
	nc.Publish(subj.Load("w2"), []byte(`{"worker_id":"w2"}`))
	g, err := reg.Register(ctx, fakeWorkerEntry("w1", "http://"+bait.Addr().String()))
	if err != nil {
		t.Fatalf("w1 registers itself: %v", err)
	}
	eventually(t, 10*time.Second, "w1 in /health", func() bool {
		var h healthWorkers
		getJSON(t, url+"/health", &h)
		return h.has("w1")
	})
	var h healthWorkers
	getJSON(t, url+"/health", &h)
	if h.has("w2") {
		t.Errorf("w2 is in /health: %+v", h)
	}
	g.Close()

	// 3. A real worker process with its own password joins and serves.
	start(t, readyURL, append([]string{"worker", "--nats", natsURL, "--nats-ca", caFile, "--id", "w3", "--http-addr", "127.0.0.1:0", "--registry-ttl", "2s"}, l.workerArgs(t, "w3")...)...)
	eventually(t, 15*time.Second, "w3 healthy in /health", func() bool {
		var h healthWorkers
		return getJSON(t, url+"/health", &h) == 200 && h.has("w3") && !h.has("w1")
	})
	code, body := postJSON(t, url+"/v1/completions", `{"model":"qwen3-0.6b","prompt":"hello there","max_tokens":4}`)
	if code != 200 {
		t.Errorf("completion through w3: %d %s", code, body)
	}
	// A worker with the wrong password is refused and says so.
	bad := filepath.Join(l.dir, "wrong")
	os.WriteFile(bad, []byte("not-the-password"), 0o600)
	cmd := exec.Command(binary(t), "worker", "--nats", natsURL, "--nats-ca", caFile, "--id", "w4", "--http-addr", "127.0.0.1:0", "--nats-password-file", bad)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(strings.ToLower(string(out)), "authorization") {
		t.Errorf("worker with a wrong password: err %v, output %s", err, out)
	}
}

// TestExternalNATSCredentials runs the frontend and a worker against a real
// external nats-server, over TLS verified with a CA (--nats-ca), that holds
// workers to their own ids with the authorization block `switchyard
// nats-config` prints: the frontend logs in
// with a password embedded in its --nats URL, which it must never print,
// the worker with its password file; an anonymous client and a worker
// registering another id are refused by the server.
func TestExternalNATSCredentials(t *testing.T) {
	if _, err := exec.LookPath("nats-server"); err != nil {
		t.Fatal("nats-server not found in PATH: this test needs a real external NATS server (Debian: apt-get install nats-server; .ci/run installs it)")
	}
	l := newNATSLogin(t)
	var conf bytes.Buffer
	cmd := exec.Command(binary(t), "nats-config", "--secret-file", l.secretFile, "--workers", "w1,w2")
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
	caFile, certFile, keyFile := writeServerPKI(t, dir)
	cfg := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\ntls { cert_file: %q, key_file: %q }\n%s",
		port, filepath.Join(dir, "js"), certFile, keyFile, conf.String())
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
	plain := "nats://127.0.0.1:" + strconv.Itoa(port)
	eventually(t, 15*time.Second, "nats-server accepts connections", func() bool {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	trust := nats.RootCAs(caFile)
	if nc, err := bus.Connect(ctx, plain, "anonymous", trust); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected to the external server")
	}
	if nc, err := bus.Connect(ctx, plain, "no tls", nats.UserInfo(bus.UserFrontend, bus.Password(l.secret, bus.UserFrontend))); err == nil {
		nc.Close()
		t.Fatal("a client without TLS connected to the TLS server")
	}

	fpass := bus.Password(l.secret, bus.UserFrontend)
	withCreds := "nats://frontend:" + fpass + "@127.0.0.1:" + strconv.Itoa(port)
	fe, m := start(t, readyURL, "frontend", "--http-addr", "127.0.0.1:0", "--nats", withCreds, "--nats-ca", caFile, "--registry-ttl", "2s", "--log-level", "debug")
	url := m[1]
	start(t, readyURL, append([]string{"worker", "--nats", plain, "--nats-ca", caFile, "--id", "w1", "--http-addr", "127.0.0.1:0", "--registry-ttl", "2s"}, l.workerArgs(t, "w1")...)...)
	eventually(t, 15*time.Second, "w1 in /health", func() bool {
		var h healthWorkers
		return getJSON(t, url+"/health", &h) == 200 && h.has("w1")
	})
	if code, body := postJSON(t, url+"/v1/completions", `{"model":"qwen3-0.6b","prompt":"hello there","max_tokens":4}`); code != 200 {
		t.Errorf("completion: %d %s", code, body)
	}
	if out := fe.output(); strings.Contains(out, fpass) {
		t.Errorf("the frontend printed its NATS password:\n%s", out)
	} else if !strings.Contains(out, "frontend:xxxxx@") {
		t.Errorf("the frontend's output does not show the redacted URL:\n%s", out)
	}

	// w2's credentials cannot register as w1 on the external server.
	_, reg := workerRegistry(ctx, t, l, plain, "w2", trust)
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second) // a refused publish is never acknowledged
	_, err = reg.Register(rctx, fakeWorkerEntry("w1", "http://127.0.0.1:1"))
	rcancel()
	if err == nil {
		t.Errorf("w2's credentials overwrote w1's registry entry")
	}
	var h struct {
		Workers []struct {
			ID  string `json:"id"`
			URL string `json:"url"`
		} `json:"workers"`
	}
	getJSON(t, url+"/health", &h)
	for _, w := range h.Workers {
		if w.ID == "w1" && w.URL == "http://127.0.0.1:1" {
			t.Errorf("w1's entry now points at the forger's URL")
		}
	}
}

func postJSON(t testing.TB, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// rssBytes reads a process's resident set size from /proc.
func rssBytes(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestWorkerSurfaces runs one `up` with a prefill and a decode worker, KV
// transfers over auto-generated mutual TLS, and checks, on the real binary:
// max_tokens extremes get a 400 (2^63−1 once panicked the worker, twice per
// request through the retry) and the workers keep serving; a disaggregated
// request moves its KV over mTLS.
func TestWorkerSurfaces(t *testing.T) {
	p, m := start(t, readyURL, "up", "--http-addr", "127.0.0.1:0", "--workers", "1", "--prefill-workers", "1",
		"--kvxfer-tls", "auto", "--disagg", "always", "--speedup", "20")
	url := m[1]
	for _, tc := range []struct {
		name, maxTokens string
		want            int
	}{
		{"2^63-1", "9223372036854775807", 400},
		{"2^63", "9223372036854775808", 400},
		{"2^31", "2147483648", 400},
		{"-1", "-1", 400},
		{"0", "0", 400},
		{"beyond context", "40960", 400},
	} {
		code, body := postJSON(t, url+"/v1/completions", `{"model":"qwen3-0.6b","prompt":"hello","max_tokens":`+tc.maxTokens+`}`)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if code != tc.want || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != tc.want {
			t.Errorf("max_tokens %s: %d %s, want %d with an OpenAI error", tc.name, code, body, tc.want)
		}
	}
	if out := p.output(); strings.Contains(out, "panic") {
		t.Fatalf("a worker panicked:\n%s", out)
	}
	prompt := strings.Repeat("switchyard signal lantern ", 200)
	req := `{"model":"qwen3-0.6b","prompt":"` + prompt + `","max_tokens":2}`
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(req))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-switchyard-prefill") != "remote" || resp.Header.Get("x-switchyard-kv-bytes") == "0" {
		t.Errorf("disaggregated request over auto mTLS: status %d, prefill %q, kv bytes %q", resp.StatusCode,
			resp.Header.Get("x-switchyard-prefill"), resp.Header.Get("x-switchyard-kv-bytes"))
	}

	if code, body := postJSON(t, url+"/v1/completions", `{"model":"qwen3-0.6b","prompt":"still alive","max_tokens":2}`); code != 200 {
		t.Errorf("after the extremes: %d %s", code, body)
	}
}

// TestKVXferFlood replays the field finding against a standalone prefill
// worker process on plain TCP: 200 unauthenticated connections that each
// announced an 8 MiB kvxfer frame (and sent its first MiB) drove a prefill
// worker from 96 MB to 1.70 GB. Each is now refused on its lease before the
// block list is read, and the process's RSS must stay flat.
func TestKVXferFlood(t *testing.T) {
	xferRe := regexp.MustCompile(`KV transfer on (\S+)`)
	p, ready := start(t, readyURL, "worker", "--role", "prefill", "--id", "p1", "--http-addr", "127.0.0.1:0")
	m := xferRe.FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("the worker printed no kvxfer address:\n%s", p.output())
	}
	addr := m[1]
	pid := p.cmd.Process.Pid
	before := rssBytes(t, pid)
	const conns = 200
	const announced = 8 << 20
	const sent = 1 << 20
	lease := "00112233445566778899aabbccddeeff"
	count := (announced - 6 - len(lease) - 4) / 8
	frame := []byte{0x01, 0, 0, 0, 0}
	be.BigEndian.PutUint32(frame[1:], uint32(6+len(lease)+4+8*count))
	frame = append(frame, 1, 0, 0, 0x40, 0, byte(len(lease))) // version, block bytes, lease length
	frame = append(frame, lease...)
	frame = be.BigEndian.AppendUint32(frame, uint32(count))
	frame = append(frame, make([]byte, sent)...)
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	refused := 0
	for range conns {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		c.Write(frame) // fails once the server has refused and closed: fine
	}
	peak := rssBytes(t, pid)
	ended := 0 // connections the server closed rather than held open
	// One deadline for all, well inside the server's 10 s read deadline,
	// so a connection held open shows as a timeout.
	deadline := time.Now().Add(3 * time.Second)
	for _, c := range open {
		c.SetReadDeadline(deadline)
		var hdr [7]byte
		_, err := io.ReadFull(c, hdr[:])
		if err == nil && hdr[0] == 0x1f && be.BigEndian.Uint16(hdr[5:]) == 1 {
			refused++ // an Error frame, code lease_unknown
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			// The refusal, or the close after it (which a reset can
			// overtake when the server leaves our body unread).
			ended++
		}
		if r := rssBytes(t, pid); r > peak {
			peak = r
		}
	}
	t.Logf("kvxfer flood: %d connections, each announcing %d MiB and sending %d MiB; worker RSS %.1f MB before, %.1f MB peak (+%.1f MB); %d refused on their lease",
		conns, announced>>20, sent>>20, float64(before)/1e6, float64(peak)/1e6, float64(peak-before)/1e6, refused)
	// Announced 1.6 GiB, sent 200 MiB; allowed: connection buffers, with a
	// wide margin.
	if grew := peak - before; grew > 100<<20 {
		t.Errorf("worker RSS grew %.0f MB under the flood: the announced frames were buffered", float64(grew)/1e6)
	}
	if ended != conns || refused == 0 {
		t.Errorf("%d of %d flood connections were closed by the worker (%d with a lease_unknown refusal), want all: the others were held open", ended, conns, refused)
	}
	var st struct{ Status string }
	if code := getJSON(t, ready[1]+"/health", &st); code != 200 || st.Status != "ok" {
		t.Errorf("worker /health after the flood: %d %+v", code, st)
	}
}

// writeServerPKI writes a CA and a server certificate for 127.0.0.1 it
// signed, as PEM files in dir.
func writeServerPKI(t testing.TB, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der), write("server-key.pem", "PRIVATE KEY", kb)
}
