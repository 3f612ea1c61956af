package bus

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/kvxfer"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func startAuthServer(t testing.TB, subj Subjects) *Embedded {
	t.Helper()
	e, err := StartEmbedded(EmbeddedConfig{StoreDir: t.TempDir(), Auth: &EmbeddedAuth{Secret: testSecret, Subjects: subj}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func connectAs(t testing.TB, url, user string, extra ...nats.Option) (*nats.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts := append([]nats.Option{nats.UserInfo(user, Password(testSecret, user))}, extra...)
	nc, err := Connect(ctx, url, t.Name(), opts...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

func connectWorker(t testing.TB, url string, id string) *nats.Conn {
	t.Helper()
	nc, err := connectAs(t, url, WorkerUser(id), nats.CustomInboxPrefix(WorkerInboxPrefix(id)))
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// TestEmbeddedAuthRefusesAnonymous is the field finding: a client with no
// credentials registered a fake worker. It must not even connect, and must
// be told at once rather than retried.
func TestEmbeddedAuthRefusesAnonymous(t *testing.T) {
	subj := Subjects{Namespace: "t"}
	e := startAuthServer(t, subj)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if nc, err := Connect(ctx, e.ClientURL(), "anonymous"); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected to the authenticated embedded server")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("anonymous connect: %v, want an authorization error", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("refused login took %v: it was retried", took)
	}
	for _, tc := range []struct{ name, user, pass string }{
		{"wrong password", UserFrontend, "nope"},
		{"unknown user", "admin", Password(testSecret, "admin")},
		{"worker with another's password", WorkerUser("w1"), Password(testSecret, WorkerUser("w2"))},
		{"bad worker id", WorkerUser("a.b"), Password(testSecret, WorkerUser("a.b"))},
	} {
		if nc, err := Connect(ctx, e.ClientURL(), tc.name, nats.UserInfo(tc.user, tc.pass)); err == nil {
			nc.Close()
			t.Errorf("%s: connected", tc.name)
		}
	}
}

// TestWorkerPermissions checks a worker can do everything it needs under
// its own id (register and read entries through the frontend, publish
// events, load and transfers, answer snapshots) and nothing under
// another's, not even by having a server or frontend answer a request on a
// reply subject it chose.
func TestWorkerPermissions(t *testing.T) {
	subj := Subjects{Namespace: "t"}
	e := startAuthServer(t, subj)
	front, err := connectAs(t, e.ClientURL(), UserFrontend)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	freg, err := OpenRegistry(ctx, RegistryConfig{NC: front, Subjects: subj, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	watch, err := freg.WatchWorkers(ctx, WatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	registrar, err := freg.StartRegistrar()
	if err != nil {
		t.Fatal(err)
	}
	defer registrar.Subscription().Unsubscribe()

	var mu sync.Mutex
	got := map[string]int{}
	sub, err := front.Subscribe(">", func(m *nats.Msg) { mu.Lock(); got[m.Subject]++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	front.Flush()

	w1 := connectWorker(t, e.ClientURL(), "w1")
	reg, err := OpenRegistry(ctx, RegistryConfig{NC: w1, Subjects: subj, ViaFrontend: true, WorkerID: "w1"})
	if err != nil {
		t.Fatalf("worker opens the registry: %v", err)
	}
	if reg.TTL() != 3*time.Second {
		t.Errorf("worker's registry TTL = %v, want the bucket's 3s", reg.TTL())
	}
	g, err := reg.Register(ctx, testWorker("w1"))
	if err != nil {
		t.Fatalf("worker registers its own id: %v", err)
	}
	defer g.Close()
	eventually(t, 5*time.Second, "w1 registered", func() bool { _, ok := watch.Worker("w1"); return ok })

	// It reads entries (a decode worker vets kvxfer addresses).
	if got, ok, err := reg.Get(ctx, "w1"); err != nil || !ok || got.HTTPURL != testWorker("w1").HTTPURL {
		t.Errorf("worker reads w1's entry: %+v %v %v", got, ok, err)
	}
	if _, ok, err := reg.Get(ctx, "w9"); err != nil || ok {
		t.Errorf("worker reads a missing entry: ok %v err %v", ok, err)
	}

	// No JetStream API answers it, on any reply subject: a direct get
	// aimed at the frontends' subject delivered w1's stored value there as
	// if a frontend had sent it, and the stream stores whatever the server
	// publishes onto its subjects (another worker's key).
	stream := "KV_" + subj.WorkersBucket()
	apis := []string{"$JS.API.DIRECT.GET." + stream + ".$KV." + subj.WorkersBucket() + ".w1", "$JS.API.DIRECT.GET." + stream,
		"$JS.API.STREAM.MSG.GET." + stream, "$JS.API.STREAM.INFO." + stream, "$JS.API.INFO",
		"$KV." + subj.WorkersBucket() + ".w1", "$JS.API.CONSUMER.CREATE." + stream, "$JS.API.STREAM.CREATE.evil",
		"$JS.API.STREAM.PURGE." + stream, "$JS.API.STREAM.DELETE." + stream}
	targets := []string{subj.Replicas(), subj.KVEvents("w2"), subj.Load("w2"), "$KV." + subj.WorkersBucket() + ".w2"}
	for _, api := range apis {
		for _, to := range targets {
			w1.PublishRequest(api, to, []byte(`{"last_by_subj":"$KV.`+subj.WorkersBucket()+`.w1","seq":1}`))
		}
	}
	var wg sync.WaitGroup
	for _, api := range apis {
		wg.Add(1)
		go func() { // a refused publish is never answered: wait out the timeouts together
			defer wg.Done()
			if m, err := w1.Request(api, []byte(`{"last_by_subj":"$KV.`+subj.WorkersBucket()+`.w1"}`), 500*time.Millisecond); err == nil {
				t.Errorf("w1 got an answer to %s: %s", api, m.Data)
			}
		}()
	}
	wg.Wait()

	// The registrar answers only on the worker's own inbox and stores only
	// the worker's own entry.
	w1.PublishRequest(subj.Registrar("w1"), subj.Replicas(), []byte(`{"op":"get","id":"w1"}`))
	raw, _ := json.Marshal(testWorker("w2"))
	forged, _ := json.Marshal(registrarRequest{Op: opPut, Entry: raw})
	if m, err := w1.Request(subj.Registrar("w1"), forged, 3*time.Second); err != nil || !strings.Contains(string(m.Data), "sent by worker w1") {
		t.Errorf("w1 putting w2's entry on its own subject: %v, want a refusal", err)
	}
	// Registering another worker's id is refused by the server.
	cctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = reg.Register(cctx, testWorker("w2"))
	cancel()
	if err == nil {
		t.Errorf("w1 registered as w2")
	}

	// Snapshot request/reply.
	ssub, err := w1.Subscribe(subj.Snapshot("w1"), func(m *nats.Msg) { m.Respond([]byte("snap")) })
	if err != nil {
		t.Fatal(err)
	}
	defer ssub.Unsubscribe()
	w1.Flush()
	if m, err := front.Request(subj.Snapshot("w1"), nil, 3*time.Second); err != nil || string(m.Data) != "snap" {
		t.Errorf("snapshot request to w1: %v", err)
	}

	for _, s := range []string{subj.KVEvents("w1"), subj.Load("w1"), subj.Transfers("w1"),
		subj.KVEvents("w2"), subj.Load("w2"), subj.Transfers("w2"), subj.Replicas()} {
		w1.Publish(s, []byte("x"))
	}
	w1.Flush()
	front.Flush()
	// A round trip through the server after the publishes: its reply comes
	// after anything that was going to be delivered to front. The ">"
	// handler sees the reply too, on its own goroutine and in order, so
	// once it has counted the reply it has counted everything before it.
	inboxes := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for s, c := range got {
			if strings.HasPrefix(s, "_INBOX.") {
				n += c
			}
		}
		return n
	}
	before := inboxes()
	if _, err := front.Request(subj.Snapshot("w1"), nil, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); inboxes() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the catch-all subscription never saw the barrier's reply: the counts below would not be final")
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range []string{subj.KVEvents("w1"), subj.Load("w1"), subj.Transfers("w1")} {
		if got[s] != 1 {
			t.Errorf("w1's own %s: delivered %d times, want 1", s, got[s])
		}
	}
	for _, s := range append(targets, subj.Transfers("w2")) {
		if got[s] != 0 {
			t.Errorf("w1 published on %s, directly or by reflection: delivered %d times, want 0", s, got[s])
		}
	}
	if _, ok := watch.Worker("w2"); ok {
		t.Errorf("w2 appears in the registry")
	}
	if registrar.Refused() < 2 {
		t.Errorf("registrar refused %d requests, want at least the aimed reply and the forged entry", registrar.Refused())
	}

	// A worker cannot read other workers' traffic.
	if _, err := w1.SubscribeSync(subj.KVEventsAll()); err == nil {
		w1.Flush()
		if err := w1.LastError(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission") {
			t.Errorf("w1 subscribed to every worker's events; last error %v", err)
		}
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://u:secret@h:4222", "nats://u:xxxxx@h:4222"},
		{"nats://tok3n@h:4222", "nats://xxxxx@h:4222"},
		{"nats://a:p1@h1:4222,nats://b:p2@h2:4222", "nats://a:xxxxx@h1:4222,nats://b:xxxxx@h2:4222"},
	}
	for _, tc := range tests {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(RedactURL(tc.in), "secret") {
			t.Errorf("secret left in %q", RedactURL(tc.in))
		}
	}
}

func TestCheckNetworks(t *testing.T) {
	nets := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")}
	tests := []struct {
		name, url, kvxfer string
		ok                bool
	}{
		{"inside", "http://10.1.2.3:8000", "10.1.2.3:9000", true},
		{"loopback host", "http://127.0.0.1:8000", "", true},
		{"url outside", "http://192.0.2.7:8000", "", false},
		{"kvxfer outside", "http://10.1.2.3:8000", "192.0.2.7:9000", false},
		{"host name", "http://evil.example:8000", "", false},
		{"v4-mapped v6 inside", "http://[::ffff:10.0.0.1]:8000", "", true},
		{"url without a host", "10.1.2.3:8000", "", false},
	}
	for _, tc := range tests {
		w := WorkerInfo{ID: "w1", HTTPURL: tc.url, KVXferAddr: tc.kvxfer}
		if err := CheckNetworks(w, nets); (err == nil) != tc.ok {
			t.Errorf("%s: CheckNetworks = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	// A bridge's probe URL is dialled with the worker key: it is held to
	// the networks too.
	if err := CheckNetworks(WorkerInfo{ID: "b", HTTPURL: "http://10.1.2.3:8000", ProbeURL: "http://192.0.2.7:8101"}, nets); err == nil {
		t.Error("probe url outside the networks accepted")
	}
	if err := CheckNetworks(WorkerInfo{ID: "b", HTTPURL: "http://10.1.2.3:8000", ProbeURL: "/probe"}, nets); err == nil || !strings.Contains(err.Error(), `probe url "/probe" does not parse`) {
		t.Errorf("probe url without a host: %v, want it named as not parsing", err)
	}
	if err := CheckNetworks(WorkerInfo{ID: "b", HTTPURL: "http://10.1.2.3:8000", ProbeURL: "http://10.1.2.3:8101"}, nets); err != nil {
		t.Errorf("probe url inside: %v", err)
	}
	if err := CheckNetworks(WorkerInfo{ID: "w", HTTPURL: "http://192.0.2.1:1"}, nil); err != nil {
		t.Errorf("no networks: %v", err)
	}
}

// TestWatcherRefusesOutsideNetworks checks an entry outside the networks is
// never routable and is listed as refused with the reason.
func TestWatcherRefusesOutsideNetworks(t *testing.T) {
	e := startServer(t)
	nc := connect(t, e.ClientURL())
	reg := openRegistry(t, nc, 0)
	w, err := reg.WatchWorkers(t.Context(), WatchConfig{Networks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	g, err := reg.Register(t.Context(), testWorker("w1")) // http://127.0.0.1:1/w1
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	eventually(t, 5*time.Second, "w1 refused", func() bool { return len(w.Refused()) == 1 })
	if r := w.Refused()[0]; !strings.Contains(r.Reason, "outside --worker-networks") {
		t.Errorf("refusal reason %q", r.Reason)
	}
	if _, ok := w.Worker("w1"); ok {
		t.Errorf("w1 is routable")
	}
}

// TestEmbeddedTLS checks an embedded server with TLS accepts only TLS
// clients that trust its CA, still checks logins over TLS, and that a client
// that does not trust it fails at once rather than retrying.
func TestEmbeddedTLS(t *testing.T) {
	srvTLS, cliTLS, err := kvxfer.AutoTLS([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srvTLS = srvTLS.Clone()
	srvTLS.ClientAuth, srvTLS.ClientCAs = tls.NoClientCert, nil // server TLS only: logins authenticate clients
	subj := Subjects{Namespace: "t"}
	e, err := StartEmbedded(EmbeddedConfig{StoreDir: t.TempDir(), TLS: srvTLS, Auth: &EmbeddedAuth{Secret: testSecret, Subjects: subj}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	trust := nats.Secure(&tls.Config{RootCAs: cliTLS.RootCAs, MinVersion: tls.VersionTLS12})
	if _, err := connectAs(t, e.ClientURL(), UserFrontend, trust); err != nil {
		t.Errorf("TLS client with the frontend login: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if nc, err := Connect(ctx, e.ClientURL(), "untrusting", nats.UserInfo(UserFrontend, Password(testSecret, UserFrontend))); err == nil {
		nc.Close()
		t.Errorf("a client that does not trust the server's CA connected")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("an untrusted certificate took %v to fail: it was retried", took)
	}
	if nc, err := Connect(ctx, e.ClientURL(), "tls anonymous", trust); err == nil {
		nc.Close()
		t.Errorf("an anonymous TLS client connected")
	}
}

// TestRegistrarFloodStarvesNoOne: a worker that floods the registrar with
// requests for its own entry gets a few served at a time and the rest
// refused, so another worker's refreshes keep going through and it never
// leaves the registry.
func TestRegistrarFloodStarvesNoOne(t *testing.T) {
	subj := Subjects{Namespace: "t"}
	e := startAuthServer(t, subj)
	front, err := connectAs(t, e.ClientURL(), UserFrontend)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	freg, err := OpenRegistry(ctx, RegistryConfig{NC: front, Subjects: subj, TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var log changeLog
	watch, err := freg.WatchWorkers(ctx, WatchConfig{OnChange: log.add})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	registrar, err := freg.StartRegistrar()
	if err != nil {
		t.Fatal(err)
	}
	defer registrar.Subscription().Unsubscribe()

	w2 := connectWorker(t, e.ClientURL(), "w2")
	reg, err := OpenRegistry(ctx, RegistryConfig{NC: w2, Subjects: subj, ViaFrontend: true, WorkerID: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := reg.Register(ctx, testWorker("w2"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	eventually(t, 5*time.Second, "w2 registered", func() bool { _, ok := watch.Worker("w2"); return ok })

	w3 := connectWorker(t, e.ClientURL(), "w3")
	raw, _ := json.Marshal(testWorker("w3"))
	put, _ := json.Marshal(registrarRequest{Op: opPut, Entry: raw})
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for fctx.Err() == nil {
			for range 1000 {
				w3.PublishRequest(subj.Registrar("w3"), WorkerInboxPrefix("w3")+".flood", put)
			}
			w3.Flush()
		}
	}()
	// Observation window: two TTLs of flood (a refresh that waits out
	// its 2 s relay timeout once still leaves w2 in time).
	time.Sleep(6 * time.Second)
	stop()
	if log.has(WorkerRemoved, "w2") {
		t.Errorf("w2 left the registry while w3 flooded the registrar")
	}
	if registrar.Refused() == 0 {
		t.Errorf("the registrar refused none of w3's flood")
	}
	t.Logf("refused %d of w3's requests", registrar.Refused())
}
