package cli

import (
	"context"
	"fmt"
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
}

func parseFrontendFlags(args []string, env Env) (frontendCmd, int) {
	var f frontendCmd
	fs := newFlagSet("frontend", "Runs the OpenAI-compatible frontend: registry watch, KV-event consumer, prefix index,\nrouter, disaggregation gate. Embeds a NATS server unless --nats is given.")
	fs.StringVar(&f.node.HTTPAddr, "http-addr", "127.0.0.1:8000", "HTTP listen address")
	fs.StringVar(&f.node.Model, "model", "qwen3-0.6b", "the model this deployment serves; workers of other models are refused")
	fs.IntVar(&f.node.BlockSize, "block-size", 16, "KV block size; workers with another are refused")
	frontendFlags(fs, &f.node)
	f.bus.add(fs, "NATS URL (empty: run an embedded NATS server, see --nats-addr)")
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
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard frontend: %v\n", err)
		return f, ExitUsage
	}
	f.node.LinkLabel = f.linkLabel
	return f, -1
}

// startBus returns a connection to natsURL, or to a new embedded server on
// addr when natsURL is empty. close releases both.
func startBus(ctx context.Context, natsURL, addr, name string, env Env) (nc *nats.Conn, url string, closeFn func(), err error) {
	var emb *bus.Embedded
	if natsURL == "" {
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, "", nil, fmt.Errorf("--nats-addr %q: %w", addr, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return nil, "", nil, fmt.Errorf("--nats-addr %q: bad port", addr)
		}
		if port == 0 {
			port = -1 // nats-server's "pick a free port"
		} else if ln, err := net.Listen("tcp", addr); err != nil {
			// nats-server only says so after its 10 s readiness wait.
			return nil, "", nil, fmt.Errorf("embedded NATS: %w (pick another with --nats-addr, 0 for a free one, or use a running server with --nats)", err)
		} else {
			ln.Close()
		}
		emb, err = bus.StartEmbedded(bus.EmbeddedConfig{Host: host, Port: port})
		if err != nil {
			return nil, "", nil, fmt.Errorf("start embedded NATS on %s: %w (is the port taken? pick another with --nats-addr)", addr, err)
		}
		natsURL = emb.ClientURL()
	}
	nc, err = connectBus(ctx, natsURL, name)
	if err != nil {
		if emb != nil {
			emb.Close()
		}
		return nil, "", nil, err
	}
	return nc, natsURL, func() {
		nc.Close()
		if emb != nil {
			emb.Close()
		}
	}, nil
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
	nc, natsURL, closeBus, err := startBus(ctx, f.bus.nats, f.natsAddr, "switchyard-frontend", env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard frontend: %v\n", err)
		return ExitFail
	}
	defer closeBus()
	cfg.NC = nc
	fe, err := node.StartFrontend(ctx, cfg)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard frontend: %v\n", err)
		return ExitFail
	}
	defer fe.Close()
	fmt.Fprintf(env.Stdout, "nats: %s\n", natsURL)
	fmt.Fprintf(env.Stdout, "ready: %s\n", fe.URL())
	fmt.Fprintf(env.Stderr, "start workers with: switchyard worker --nats %s --namespace %s --id w1 --http-addr 127.0.0.1:8101\n", natsURL, f.bus.namespace)
	<-ctx.Done()
	return ExitOK
}
