package kvxfer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSFiles names PEM files for kvxfer's TLS. A server needs CertFile and
// KeyFile; giving it CAFile turns on mutual TLS (clients must present a
// certificate signed by that CA). A client needs CAFile to trust the server
// (or uses the system roots without it), and CertFile/KeyFile for mutual TLS.
type TLSFiles struct {
	CertFile string
	KeyFile  string
	CAFile   string
	// ServerName overrides the name a client checks in the server's
	// certificate; by default the dialled host.
	ServerName string
}

// Enabled reports whether any TLS file is configured.
func (f TLSFiles) Enabled() bool {
	return f.CertFile != "" || f.KeyFile != "" || f.CAFile != ""
}

// ServerConfig builds the server side: TLS 1.3, and client certificates
// required and verified when a CA is given.
func (f TLSFiles) ServerConfig() (*tls.Config, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, errors.New("kvxfer: tls server needs both a certificate and a key file")
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("kvxfer: load tls key pair %s, %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	if f.CAFile != "" {
		pool, err := loadPool(f.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientConfig builds the client side: TLS 1.3, the CA (if any) as the only
// trusted root, and a client certificate when one is given.
func (f TLSFiles) ClientConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: f.ServerName}
	if f.CAFile != "" {
		pool, err := loadPool(f.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kvxfer: load tls key pair %s, %s: %w", f.CertFile, f.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kvxfer: read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("kvxfer: CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}
