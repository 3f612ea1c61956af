package kvxfer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func splitAddr(t testing.TB, addr string) (string, int) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all generated now, into a temp dir.
type testPKI struct {
	dir                                string
	caFile, serverCert, serverKey      string
	clientCert, clientKey, otherCAFile string
}

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	dir := t.TempDir()
	p := &testPKI{dir: dir}
	caKey, caCert, caDER := makeCA(t, "switchyard test CA")
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	_, _, otherDER := makeCA(t, "some other CA")
	p.otherCAFile = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", otherDER)
	p.serverCert, p.serverKey = makeLeaf(t, dir, "server", caKey, caCert, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = makeLeaf(t, dir, "client", caKey, caCert, x509.ExtKeyUsageClientAuth)
	return p
}

func makeCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

func makeLeaf(t testing.TB, dir, name string, caKey *ecdsa.PrivateKey, ca *x509.Certificate, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", kder)
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTLS(t *testing.T) {
	pki := newTestPKI(t)
	tests := []struct {
		name    string
		server  TLSFiles
		client  *TLSFiles // nil: plain TCP
		wantErr bool
	}{
		{"tls", TLSFiles{CertFile: pki.serverCert, KeyFile: pki.serverKey}, &TLSFiles{CAFile: pki.caFile}, false},
		{"mtls", TLSFiles{CertFile: pki.serverCert, KeyFile: pki.serverKey, CAFile: pki.caFile},
			&TLSFiles{CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey}, false},
		{"mtls client without cert", TLSFiles{CertFile: pki.serverCert, KeyFile: pki.serverKey, CAFile: pki.caFile},
			&TLSFiles{CAFile: pki.caFile}, true},
		{"client distrusts server", TLSFiles{CertFile: pki.serverCert, KeyFile: pki.serverKey}, &TLSFiles{CAFile: pki.otherCAFile}, true},
		{"plain client to tls server", TLSFiles{CertFile: pki.serverCert, KeyFile: pki.serverKey}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scfg, err := tt.server.ServerConfig()
			if err != nil {
				t.Fatal(err)
			}
			s := startServer(t, ServerConfig{BlockBytes: 4096, TLS: scfg, IOTimeout: 2 * time.Second})
			hashes := randomHashes(11, 3)
			tok, _ := s.Lease(hashes, nil)
			ccfg := ClientConfig{BlockBytes: 4096, IOTimeout: 2 * time.Second}
			if tt.client != nil {
				if ccfg.TLS, err = tt.client.ClientConfig(); err != nil {
					t.Fatal(err)
				}
			}
			delivered := 0
			err = func() error {
				c, err := Dial(context.Background(), s.Addr(), ccfg)
				if err != nil {
					return err
				}
				defer c.Close()
				if _, _, err := c.Probe(context.Background(), 1<<20); err != nil {
					return err
				}
				_, err = c.Pull(context.Background(), tok, hashes, func(uint64) error { delivered++; return nil })
				return err
			}()
			if tt.wantErr {
				if err == nil {
					t.Fatal("transfer succeeded, want refusal")
				}
				if delivered != 0 || s.Leases() != 1 {
					t.Errorf("refused client: delivered %d blocks, %d live leases; want 0 and 1 (lease untouched)", delivered, s.Leases())
				}
				return
			}
			if err != nil || delivered != 3 {
				t.Errorf("transfer: delivered %d, err %v; want 3, nil", delivered, err)
			}
		})
	}
}

func TestTLSFilesErrors(t *testing.T) {
	if _, err := (TLSFiles{CAFile: "x"}).ServerConfig(); err == nil {
		t.Error("server TLS without a key pair accepted")
	}
	if _, err := (TLSFiles{CAFile: filepath.Join(t.TempDir(), "missing.pem")}).ClientConfig(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing CA file: %v, want os.ErrNotExist", err)
	}
}
