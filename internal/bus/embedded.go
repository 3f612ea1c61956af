package bus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures an in-process NATS server.
type EmbeddedConfig struct {
	// Host to listen on; "" means 127.0.0.1.
	Host string
	// Port for clients; 0 picks a free port (the CLI passes 4222).
	Port int
	// StoreDir holds JetStream data; "" means a fresh temporary directory,
	// removed by Close.
	StoreDir string
	// DisableJetStream runs plain NATS only (no registry possible).
	DisableJetStream bool
	// ServerName must be unique within a cluster; "" lets NATS pick one.
	ServerName string
	// Cluster, when non-nil, joins this server to a NATS cluster.
	Cluster *ClusterConfig
	// MaxPayload is the largest message in bytes; 0 means 8 MiB, enough for
	// a KV snapshot of about 900k blocks (9 bytes per hash).
	MaxPayload int32
	// ReadyTimeout bounds the wait for the server to accept connections;
	// 0 means 10 s.
	ReadyTimeout time.Duration
	// Logger receives the server's log; nil silences it.
	Logger *slog.Logger
	// Auth, when set, makes every client authenticate (see EmbeddedAuth);
	// nil leaves the server open to anyone who can reach it.
	Auth *EmbeddedAuth
	// TLS, when set, makes clients connect over TLS (with its
	// certificate), so logins and traffic are not readable on the wire.
	TLS *tls.Config
}

// ClusterConfig joins an embedded server to a cluster over NATS routes.
type ClusterConfig struct {
	Name string // cluster name, the same on every node
	Host string // "" means 127.0.0.1
	Port int    // route listen port; 0 picks a free port
	// Routes are other nodes' route URLs (nats-route://host:port); routes
	// gossip, so pointing every node at one seed is enough.
	Routes []string
}

// Embedded is a running in-process NATS server. Close stops it and waits.
type Embedded struct {
	srv     *server.Server
	tempDir string
}

// StartEmbedded starts a NATS server in-process and waits until it accepts
// connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	opts := &server.Options{
		ServerName: cfg.ServerName,
		Host:       cfg.Host,
		Port:       cfg.Port,
		NoLog:      cfg.Logger == nil,
		NoSigs:     true,
		MaxPayload: cfg.MaxPayload,
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 8 << 20
	}
	if cfg.TLS != nil {
		opts.TLSConfig, opts.TLS = cfg.TLS, true
		opts.TLSTimeout = 2 // seconds
	}
	if a := cfg.Auth; a != nil {
		if err := a.validate(); err != nil {
			return nil, err
		}
		opts.CustomClientAuthentication = authenticator{auth: *a}
	}
	e := &Embedded{}
	if !cfg.DisableJetStream {
		opts.JetStream = true
		opts.StoreDir = cfg.StoreDir
		if opts.StoreDir == "" {
			dir, err := os.MkdirTemp("", "switchyard-nats-")
			if err != nil {
				return nil, fmt.Errorf("bus: jetstream store dir: %w", err)
			}
			e.tempDir = dir
			opts.StoreDir = dir
		}
	}
	if c := cfg.Cluster; c != nil {
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: c.Host, Port: c.Port}
		if opts.Cluster.Host == "" {
			opts.Cluster.Host = "127.0.0.1"
		}
		if opts.Cluster.Port == 0 {
			opts.Cluster.Port = server.RANDOM_PORT
		}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				e.removeTemp()
				return nil, fmt.Errorf("bus: cluster route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		e.removeTemp()
		return nil, fmt.Errorf("bus: start embedded nats: %w", err)
	}
	if cfg.Logger != nil {
		srv.SetLogger(slogAdapter{cfg.Logger}, false, false)
	}
	e.srv = srv
	srv.Start()
	wait := cfg.ReadyTimeout
	if wait == 0 {
		wait = 10 * time.Second
	}
	if !srv.ReadyForConnections(wait) {
		e.Close()
		return nil, fmt.Errorf("bus: embedded nats on %s:%d not ready after %v", opts.Host, opts.Port, wait)
	}
	return e, nil
}

// InProcessConn is a connection to the server within the process, for
// nats.InProcessServer: the embedding process's own client then reaches
// its server without loopback TCP (no system call or network-poller
// wakeup per message).
func (e *Embedded) InProcessConn() (net.Conn, error) { return e.srv.InProcessConn() }

// ClientURL is the nats:// URL clients connect to.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// RouteURL is the nats-route:// URL other cluster nodes route to; "" when
// the server is not clustered.
func (e *Embedded) RouteURL() string {
	a := e.srv.ClusterAddr()
	if a == nil {
		return ""
	}
	return "nats-route://" + net.JoinHostPort(a.IP.String(), strconv.Itoa(a.Port))
}

// NumRoutes is the number of cluster routes currently up.
func (e *Embedded) NumRoutes() int { return e.srv.NumRoutes() }

// Close shuts the server down, waits for it to stop and removes a temporary
// store directory. It is safe to call more than once.
func (e *Embedded) Close() error {
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	}
	return e.removeTemp()
}

func (e *Embedded) removeTemp() error {
	if e.tempDir == "" {
		return nil
	}
	dir := e.tempDir
	e.tempDir = ""
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("bus: remove jetstream store: %w", err)
	}
	return nil
}

// slogAdapter routes the NATS server's printf-style log to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(f string, v ...any) { a.l.Info(fmt.Sprintf(f, v...), "component", "nats") }
func (a slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...), "component", "nats") }
func (a slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...), "component", "nats") }
func (a slogAdapter) Errorf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...), "component", "nats") }
func (a slogAdapter) Debugf(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...), "component", "nats") }
func (a slogAdapter) Tracef(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...), "component", "nats") }
