package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

func TestNATSLoginOptions(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	creds := filepath.Join(dir, "user.creds")
	os.WriteFile(creds, []byte("x"), 0o600)
	tests := []struct {
		name        string
		flags       natsAuthFlags
		env         map[string]string
		defaultUser string
		wantErr     string // "" : ok
		wantOpts    int
	}{
		{"none", natsAuthFlags{}, nil, "", "", 0},
		{"password file, default user", natsAuthFlags{passwordFile: pw}, nil, "worker:w1", "", 1},
		{"password from env with user", natsAuthFlags{}, map[string]string{envNATSPassword: "p", envNATSUser: "u"}, "", "", 1},
		{"password without any user", natsAuthFlags{passwordFile: pw}, nil, "", "needs a user", 0},
		{"user without password", natsAuthFlags{user: "u"}, nil, "", "has no password", 0},
		{"two logins", natsAuthFlags{passwordFile: pw, credsFile: creds}, nil, "worker:w1", "one NATS login", 0},
		{"missing creds file", natsAuthFlags{credsFile: filepath.Join(dir, "nope")}, nil, "", "--nats-creds", 0},
		{"cert without key", natsAuthFlags{certFile: "c.pem"}, nil, "", "go together", 0},
		{"ca", natsAuthFlags{caFile: "ca.pem"}, nil, "", "", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := tc.flags.options(func(k string) string { return tc.env[k] }, tc.defaultUser, "")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
			case tc.wantErr == "" && len(opts) != tc.wantOpts:
				t.Errorf("%d options, want %d", len(opts), tc.wantOpts)
			}
		})
	}
}

// TestNATSSecretGenerated checks a generated secret is written 0600 and is
// long enough, and a short given one is refused.
func TestNATSSecretGenerated(t *testing.T) {
	var a natsAuthFlags
	dir := t.TempDir()
	secret, path, err := a.secret(func(string) string { return "" }, dir, "sy")
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("secret file %s: %v, mode %v", path, err, st.Mode())
	}
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != string(secret) || len(secret) < 32 {
		t.Errorf("secret file holds %q, secret %q", b, secret)
	}
	if _, _, err := a.secret(func(k string) string { return map[string]string{envNATSSecret: "short"}[k] }, "", ""); err == nil {
		t.Errorf("a 5-byte secret was accepted")
	}
}

// TestNATSNkeyLogin checks --nats-nkey logs in to a server that knows the
// user's public nkey, and that the server refuses the same client without it.
func TestNATSNkeyLogin(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	os.WriteFile(seedFile, seed, 0o600)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	a := natsAuthFlags{nkey: seedFile}
	opts, err := a.options(func(string) string { return "" }, "", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := bus.Connect(ctx, srv.ClientURL(), "nkey user", opts...)
	if err != nil {
		t.Fatalf("nkey login: %v", err)
	}
	nc.Close()
	if nc, err := bus.Connect(ctx, srv.ClientURL(), "anonymous"); err == nil {
		nc.Close()
		t.Errorf("anonymous client connected to an nkey server")
	}
}
