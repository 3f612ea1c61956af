package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/node"
)

func init() {
	register(command{name: "frontend", summary: "run the OpenAI-compatible frontend with the KV router", run: runFrontend})
}

type frontendCmd struct {
	node      node.FrontendConfig
	bus       busFlags
	natsAddr  string
	logLevel  string
	linkLabel string
	tokenizer string
}

func parseFrontendFlags(args []string, env Env) (frontendCmd, int) {
	var f frontendCmd
	fs := newFlagSet("frontend", "Runs the OpenAI-compatible frontend: registry watch, KV-event consumer, prefix index,\nrouter, disaggregation gate. Embeds a NATS server unless --nats is given.")
	fs.StringVar(&f.node.HTTPAddr, "http-addr", "127.0.0.1:8000", "HTTP listen address")
	fs.StringVar(&f.node.Model, "model", "", "serve only this model, refusing workers of others (default: every model workers register)")
	fs.IntVar(&f.node.BlockSize, "block-size", 16, "KV block size; workers with another are refused")
	frontendFlags(fs, &f.node)
	tokenizerFlag(fs, &f.tokenizer)
	f.bus.add(fs, "NATS URL (empty: run an embedded NATS server, see --nats-addr)")
	f.bus.login.add(fs, true)
	fs.StringVar(&f.natsAddr, "nats-addr", "127.0.0.1:4222", "embedded NATS listen address, when --nats is empty (port 0 picks one)")
	fs.StringVar(&f.linkLabel, "link-label", "", "label links in reports, e.g. \"1 Gbit/s (emulated)\" when workers emulate the link")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	if code := parseFlags(fs, args, env); code >= 0 {
		return f, code
	}
	err := checkFrontendConfig(&f.node, os.Getenv)
	if err == nil && f.bus.nats == "" {
		err = checkListenAddr("--nats-addr", f.natsAddr)
	}
	if err == nil {
		err = f.bus.check()
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard frontend: %v\n", err)
		return f, ExitUsage
	}
	f.node.LinkLabel = f.linkLabel
	return f, -1
}

// busConn is a process's connection to the bus, and what it knows to let
// workers join.
type busConn struct {
	nc  *nats.Conn
	url string // what clients dial; print it with bus.RedactURL
	// secret is the embedded server's deployment secret when it requires
	// logins; nil otherwise.
	secret []byte
	// secretPath is the 0600 file a generated secret was written to.
	secretPath string
	// login is the options the frontend connected with, for workers of
	// the same process when the server is external.
	login []nats.Option
	// tls is the embedded server's TLS trust, for workers of this process.
	tls []nats.Option
	emb *bus.Embedded
}

// workerOptions are the login options worker id uses on this bus: its own
// user when the embedded server requires logins, else the process's.
func (b *busConn) workerOptions(id string) []nats.Option {
	opts := []nats.Option{nats.CustomInboxPrefix(bus.WorkerInboxPrefix(id))}
	if b.secret != nil {
		u := bus.WorkerUser(id)
		return append(append(opts, b.tls...), nats.UserInfo(u, bus.Password(b.secret, u)))
	}
	if b.emb != nil {
		return append(opts, b.tls...)
	}
	return append(opts, b.login...)
}

func (b *busConn) close() {
	b.nc.Close()
	if b.emb != nil {
		b.emb.Close()
	}
}

// startBus connects to --nats, or starts an embedded server on addr when it
// is empty. An embedded server requires logins unless --nats-auth=false:
// the process logs in as the frontend, and workers with passwords derived
// from the deployment secret (secretDir, if set, is where a generated one is
// written).
func startBus(ctx context.Context, notice io.Writer, bf busFlags, subj bus.Subjects, addr, name, secretDir string, log *slog.Logger) (*busConn, error) {
	b := &busConn{url: bf.nats}
	if bf.nats != "" {
		opts, err := bf.login.options(os.Getenv, "", "")
		if err != nil {
			return nil, err
		}
		b.login = opts
		if b.nc, err = connectBus(ctx, notice, bf.nats, name, opts...); err != nil {
			return nil, err
		}
		if err := bf.guardBus(ctx, b.nc, log); err != nil {
			b.nc.Close()
			return nil, err
		}
		return b, nil
	}
	if bf.login.hasLogin(os.Getenv) {
		return nil, errors.New("--nats-user, --nats-password-file, --nats-creds and --nats-nkey (and $" + envNATSUser + ", $" + envNATSPassword +
			") log in to an external server given with --nats; the embedded server makes its own logins (see --nats-secret-file)")
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--nats-addr %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("--nats-addr %q: bad port", addr)
	}
	if port == 0 {
		port = -1 // nats-server's "pick a free port"
	} else if ln, err := net.Listen("tcp", addr); err != nil {
		// nats-server only says so after its 10 s readiness wait.
		return nil, fmt.Errorf("embedded NATS: %w (pick another with --nats-addr, 0 for a free one, or use a running server with --nats)", err)
	} else {
		ln.Close()
	}
	ecfg := bus.EmbeddedConfig{Host: host, Port: port}
	var opts []nats.Option
	if (bf.login.tlsCertFile == "") != (bf.login.tlsKeyFile == "") {
		return nil, errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	if bf.login.tlsCertFile != "" {
		cert, err := tls.LoadX509KeyPair(bf.login.tlsCertFile, bf.login.tlsKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-tls-cert/--nats-tls-key: %w", err)
		}
		if bf.login.caFile == "" {
			return nil, errors.New("--nats-tls-cert needs --nats-ca, the CA that signed it: the frontend verifies its own server like any client")
		}
		ecfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		b.tls = []nats.Option{nats.RootCAs(bf.login.caFile)}
		opts = append(opts, b.tls...)
	} else if bf.login.caFile != "" {
		return nil, errors.New("--nats-ca with the embedded server needs --nats-tls-cert and --nats-tls-key to serve TLS")
	}
	if bf.login.auth {
		if b.secret, b.secretPath, err = bf.login.secret(os.Getenv, secretDir, "switchyard-nats"); err != nil {
			return nil, err
		}
		ecfg.Auth = &bus.EmbeddedAuth{Secret: b.secret, Subjects: subj}
		opts = append(opts, nats.UserInfo(bus.UserFrontend, bus.Password(b.secret, bus.UserFrontend)))
	}
	if b.emb, err = bus.StartEmbedded(ecfg); err != nil {
		return nil, fmt.Errorf("start embedded NATS on %s: %w (is the port taken? pick another with --nats-addr)", addr, err)
	}
	b.url = b.emb.ClientURL()
	if ecfg.TLS == nil {
		// The frontend's own client reaches its server in process; with
		// TLS it dials like any client, so that it checks the certificate
		// its workers see.
		opts = append(opts, nats.InProcessServer(b.emb))
	}
	if b.nc, err = connectBus(ctx, notice, b.url, name, opts...); err != nil {
		b.emb.Close()
		return nil, err
	}
	return b, nil
}

func runFrontend(ctx context.Context, args []string, env Env) int {
	f, code := parseFrontendFlags(args, env)
	if code >= 0 {
		return code
	}
	log, err := newLogger(env.Stderr, f.logLevel)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard frontend: %v\n", err)
		return ExitUsage
	}
	cfg := f.node
	cfg.Logger = log
	warnAdminExposed(log, &cfg)
	if cfg.Subjects, err = bus.NewSubjects(f.bus.namespace); err != nil {
		fmt.Fprintf(env.Stderr, "switchyard frontend: --namespace: %v\n", err)
		return ExitUsage
	}
	cfg.RegistryTTL = f.bus.registryTTL
	bc, err := startBus(ctx, env.Stderr, f.bus, cfg.Subjects, f.natsAddr, "switchyard-frontend", os.TempDir(), log)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard frontend: %v\n", err)
		return ExitFail
	}
	defer bc.close()
	if bc.secretPath != "" {
		defer os.Remove(bc.secretPath)
	}
	cfg.NC = bc.nc
	tokName := "engine (POST /tokenize on a worker, cached by body digest)"
	if f.tokenizer == "engine" {
		cfg.EngineTokenizer = true
	} else {
		tok, err := openTokenizer(f.tokenizer)
		if err != nil {
			fmt.Fprintf(env.Stderr, "switchyard frontend: %v\n", err)
			return ExitFail
		}
		cfg.Tokenizer, tokName = tok, tok.Name()
	}
	fe, err := node.StartFrontend(ctx, cfg)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard frontend: %v\n", err)
		return ExitFail
	}
	defer fe.Close()
	natsURL := bus.RedactURL(bc.url)
	fmt.Fprintf(env.Stdout, "nats: %s\n", natsURL)
	fmt.Fprintf(env.Stdout, "ready: %s\n", fe.URL())
	switch {
	case bc.secret != nil:
		where := "the secret you gave"
		secretArg, caArg := "", ""
		if f.bus.login.caFile != "" {
			caArg = " --nats-ca " + f.bus.login.caFile
		}
		if bc.secretPath != "" {
			where = "a new secret in " + bc.secretPath + " (0600, removed at exit)"
			secretArg = " --secret-file " + bc.secretPath
		}
		fmt.Fprintf(env.Stderr, "embedded NATS requires logins; worker passwords derive from %s.\n"+
			"start a worker with its own password:\n  SWITCHYARD_NATS_PASSWORD=$(switchyard nats-password%s --id w1) switchyard worker --nats %s%s --namespace %s --id w1 --http-addr 127.0.0.1:8101\n",
			where, secretArg, natsURL, caArg, f.bus.namespace)
	case f.bus.nats == "":
		fmt.Fprintf(env.Stderr, "embedded NATS is open (--nats-auth=false): anyone who reaches it can register a worker.\n"+
			"start workers with: switchyard worker --nats %s --namespace %s --id w1 --http-addr 127.0.0.1:8101\n", natsURL, f.bus.namespace)
	default:
		fmt.Fprintf(env.Stderr, "start workers with: switchyard worker --nats %s --namespace %s --id w1 --http-addr 127.0.0.1:8101 (and their NATS login)\n", natsURL, f.bus.namespace)
	}
	fmt.Fprintf(env.Stderr, "tokenizer: %s\n", tokName)
	<-ctx.Done()
	fmt.Fprintf(env.Stderr, "draining: finishing the requests in flight (at most %v)...\n", cfg.DrainTimeout)
	if left := fe.Drain(cfg.DrainTimeout); left > 0 {
		fmt.Fprintf(env.Stderr, "drain timeout: %d requests still open are cut\n", left)
	}
	return ExitOK
}
