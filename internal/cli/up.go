package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bridge"
	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvxfer"
	"github.com/switchyard-llm/switchyard/internal/node"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
	"github.com/switchyard-llm/switchyard/internal/vllmpub"
)

func init() {
	register(command{name: "up", summary: "run a whole local cluster: embedded NATS, frontend, simulated workers", run: runUp})
}

type upCmd struct {
	frontend       node.FrontendConfig
	engine         sim.Config
	bus            busFlags
	tls            kvxfer.TLSFiles
	natsAddr       string
	workers        int
	split          []int        // workers per model, in models' order
	models         []string     // the --model list: one, or a fleet
	adapters       adaptersFlag // name=base: the adapter on every worker of base
	prefillWorkers int
	eventsOff      int
	linkRate       string
	logLevel       string
	kvxferTLS      string
	engineWire     string
	wireQuirks     vllmpub.Quirks
	wireArrays     bool
	tokenizer      string
}

func parseUpFlags(args []string, env Env) (upCmd, int) {
	var u upCmd
	u.workers = 2
	fs := newFlagSet("up", "Runs a whole cluster in one process: an embedded NATS server, the frontend with the KV router\nand disaggregation gate, and simulated workers registered over the bus.")
	fs.StringVar(&u.frontend.HTTPAddr, "http-addr", "127.0.0.1:8000", "frontend HTTP listen address")
	fs.Var(&workerSplit{n: &u.workers, split: &u.split}, "workers", "simulated workers (decode role when --prefill-workers > 0, else aggregated); with several --model, split evenly, or one count per model: 3,1 (default 2)")
	fs.IntVar(&u.prefillWorkers, "prefill-workers", 0, "simulated prefill-role workers (disaggregated serving)")
	fs.IntVar(&u.eventsOff, "kv-events-off", 0, "start the last N workers with KV events disabled (to see the health check)")
	fs.StringVar(&u.linkRate, "link-rate", "", "emulate the prefill → decode link at this rate, e.g. 1gbit or 10gbit (in-process token bucket)")
	engineFlags(fs, &u.engine)
	fs.Var(&u.adapters, "lora-modules", "LoRA adapters, name=base, comma-separated: each is served by every worker of its base model")
	fs.IntVar(&u.engine.MaxLoRAs, "max-loras", 1, "LoRA adapters in a worker's GPU memory at once; a request for another waits for a slot and pays --lora-swap")
	fs.DurationVar(&u.engine.LoRASwap, "lora-swap", 50*time.Millisecond, "simulated time to load a LoRA adapter into a slot")
	frontendFlags(fs, &u.frontend)
	tokenizerFlag(fs, &u.tokenizer)
	u.bus.add(fs, "NATS URL (empty: embedded server on --nats-addr)")
	u.bus.login.add(fs, true)
	fs.StringVar(&u.natsAddr, "nats-addr", "127.0.0.1:0", "embedded NATS listen address (port 0 picks a free one)")
	tlsFlags(fs, &u.tls)
	fs.StringVar(&u.kvxferTLS, "kvxfer-tls", "", "auto: mutual TLS between the workers' KV transfers, with certificates generated in memory for this run")
	fs.StringVar(&u.engineWire, "engine-wire", "", "vllm: each simulated worker publishes KV events on ZMQ as vLLM does and joins through a bridge (switchyard worker --engine vllm), as a real engine would")
	wireQuirkFlags(fs, &u.wireQuirks, &u.wireArrays, "with --engine-wire vllm, every worker")
	fs.StringVar(&u.logLevel, "log-level", "warn", "debug, info, warn or error")
	if code := parseFlags(fs, args, env); code >= 0 {
		return u, code
	}
	if err := checkWireQuirks(u.wireQuirks, u.wireArrays, u.engineWire != "", "--engine-wire"); err != nil {
		return u, badUp(env, "%v", err)
	}
	switch {
	case u.engineWire != "" && u.engineWire != "vllm":
		return u, badUp(env, "--engine-wire %q: want vllm", u.engineWire)
	case u.engineWire != "" && u.prefillWorkers > 0:
		return u, badUp(env, "--engine-wire vllm runs aggregated workers only (vLLM's P/D connector is not simulated): drop --prefill-workers")
	case u.engineWire != "" && u.eventsOff > 0:
		return u, badUp(env, "--engine-wire vllm with --kv-events-off is not supported: a bridge always carries its engine's events")
	}
	bad := func(format string, a ...any) (upCmd, int) {
		fmt.Fprintf(env.Stderr, "switchyard up: "+format+"\n", a...)
		return u, ExitUsage
	}
	if u.workers < 1 {
		return bad("--workers %d: need at least one", u.workers)
	}
	u.models = strings.Split(u.engine.Model, ",")
	if len(u.split) == 0 {
		u.split = evenSplit(u.workers, len(u.models))
	}
	if len(u.split) != len(u.models) || slices.Contains(u.split, 0) {
		return bad("--workers %s for %d models (--model %s): give one count per model, each at least 1, or a total of at least %d", (&workerSplit{n: &u.workers, split: &u.split}).String(), len(u.models), u.engine.Model, len(u.models))
	}
	for i, m := range u.models {
		if slices.Index(u.models, m) != i {
			return bad("--model %s lists %q twice", u.engine.Model, m)
		}
		c := u.engine
		c.Model = m
		if err := checkEngineConfig(c); err != nil {
			return bad("%v", err)
		}
	}
	for _, a := range u.adapters {
		if !slices.Contains(u.models, a.Root) {
			return bad("--lora-modules %s=%s: the base must be one of --model %s", a.Name, a.Root, u.engine.Model)
		}
	}
	if u.prefillWorkers < 0 {
		return bad("--prefill-workers %d is negative", u.prefillWorkers)
	}
	if u.eventsOff < 0 || u.eventsOff > u.workers+u.prefillWorkers {
		return bad("--kv-events-off %d: want 0..%d", u.eventsOff, u.workers+u.prefillWorkers)
	}
	if u.linkRate != "" && u.prefillWorkers == 0 {
		return bad("--link-rate needs --prefill-workers > 0: it emulates the prefill → decode link")
	}
	if u.frontend.Disagg == "always" && u.prefillWorkers == 0 {
		fmt.Fprintln(env.Stderr, "switchyard up: warning: --disagg always without --prefill-workers: there is no prefill worker, so every request prefills locally; add --prefill-workers N to disaggregate")
	}
	if err := checkFrontendConfig(&u.frontend, os.Getenv); err != nil {
		return bad("%v", err)
	}
	if err := checkListenAddr("--nats-addr", u.natsAddr); err != nil {
		return bad("%v", err)
	}
	if err := u.bus.check(); err != nil {
		return bad("%v", err)
	}
	switch {
	case u.kvxferTLS != "" && u.kvxferTLS != "auto":
		return bad("--kvxfer-tls %q: want auto (or the --kvxfer-tls-cert/-key/-ca files)", u.kvxferTLS)
	case u.kvxferTLS == "auto" && u.tls.Enabled():
		return bad("--kvxfer-tls auto generates its own certificates: drop --kvxfer-tls-cert/-key/-ca, or drop --kvxfer-tls")
	}
	return u, -1
}

func runUp(ctx context.Context, args []string, env Env) int {
	u, code := parseUpFlags(args, env)
	if code >= 0 {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(env.Stderr, "switchyard up: %v\n", err)
		return code
	}
	log, err := newLogger(env.Stderr, u.logLevel)
	if err != nil {
		return fail(ExitUsage, err)
	}
	warnAdminExposed(log, &u.frontend)
	rate, err := parseLinkRate(u.linkRate)
	if err != nil {
		return fail(ExitUsage, err)
	}
	subj, err := bus.NewSubjects(u.bus.namespace)
	if err != nil {
		return fail(ExitUsage, fmt.Errorf("--namespace: %w", err))
	}
	var wtmpl node.WorkerConfig
	if err := applyTLS(u.tls, &wtmpl); err != nil {
		return fail(ExitUsage, err)
	}
	if u.kvxferTLS == "auto" {
		// Every worker runs here on loopback; the CA key never leaves
		// AutoTLS, so only this process's workers can join the transfers.
		if wtmpl.KVXferServerTLS, wtmpl.KVXferClientTLS, err = kvxfer.AutoTLS([]string{"127.0.0.1", "::1", "localhost"}, 30*24*time.Hour); err != nil {
			return fail(ExitFail, err)
		}
	}
	if u.frontend.WorkerKey == "" {
		// The frontend and the workers live in this process: a key made
		// now guards the workers' /v1, admin and probe endpoints with nothing
		// for the operator to set.
		if u.frontend.WorkerKey, err = randomKey(); err != nil {
			return fail(ExitFail, err)
		}
	}
	wtmpl.WorkerKey = u.frontend.WorkerKey

	// The secret of up's own embedded server never leaves this process:
	// each worker below logs in with the password derived for its id.
	bc, err := startBus(ctx, env.Stderr, u.bus, subj, u.natsAddr, "switchyard-up", "", log)
	if err != nil {
		return fail(ExitFail, err)
	}
	defer bc.close()
	nc, natsURL := bc.nc, bus.RedactURL(bc.url)

	fcfg := u.frontend
	tokName := "engine (the workers' POST /tokenize)"
	if u.tokenizer == "engine" {
		// The simulated engines keep their own (default) tokenizer and
		// the frontend asks them, as it would ask vLLM.
		fcfg.EngineTokenizer = true
	} else {
		tok, err := openTokenizer(u.tokenizer)
		if err != nil {
			return fail(ExitFail, err)
		}
		u.engine.Tokenizer = tok
		fcfg.Tokenizer, tokName = tok, tok.Name()
	}
	fcfg.NC, fcfg.Subjects, fcfg.RegistryTTL, fcfg.Logger = nc, subj, u.bus.registryTTL, log
	fcfg.Model, fcfg.BlockSize = u.engine.Model, u.engine.BlockSize
	if len(u.models) > 1 {
		fcfg.Model = "" // a fleet: the frontend serves every model its workers register
	}
	if rate > 0 {
		fcfg.LinkLabel = rate.String()
	}
	fe, err := node.StartFrontend(ctx, fcfg)
	if err != nil {
		return fail(ExitFail, err)
	}
	// Closed in the workers' cleanup below, before them: it drains client
	// requests first, and a frontend that is already gone does not report
	// its own workers leaving.
	feClosed := false
	defer func() {
		if !feClosed {
			fe.Close()
		}
	}()

	role := bus.RoleAggregated
	if u.prefillWorkers > 0 {
		role = bus.RoleDecode
	}
	type spec struct{ id, role, model string }
	var specs []spec
	n := 0
	for m, k := range evenSplit(u.prefillWorkers, len(u.models)) {
		for range k {
			n++
			specs = append(specs, spec{fmt.Sprintf("prefill-%d", n), bus.RolePrefill, u.models[m]})
		}
	}
	n = 0
	for m, k := range u.split {
		for range k {
			n++
			name := "worker"
			if role == bus.RoleDecode {
				name = "decode"
			}
			specs = append(specs, spec{fmt.Sprintf("%s-%d", name, n), role, u.models[m]})
		}
	}
	fmt.Fprintf(env.Stderr, "starting %d workers (%s on %s)...\n", len(specs), u.engine.Model, u.engine.GPU)
	var workers []*node.Worker
	var entries []bus.WorkerInfo // what each worker registered, as the frontend sees it
	var conns []*nats.Conn
	var bridges []*bridge.Bridge
	defer func() {
		fe.Close()
		feClosed = true
		for _, b := range bridges {
			_ = b.Close()
		}
		for _, w := range workers {
			_ = w.Close()
		}
		for _, c := range conns { // after the workers: they deregister over them
			c.Close()
		}
	}()
	for i, s := range specs {
		wc := wtmpl
		wc.Sim = u.engine
		wc.Sim.ID, wc.Sim.Role, wc.Sim.Model = s.id, s.role, s.model
		if ms, ok := fcfg.Models[s.model]; ok {
			// The model's own settings from --config: its workers must
			// tokenize and block as the frontend hashes for it.
			if ms.BlockSize > 0 {
				wc.Sim.BlockSize = ms.BlockSize
			}
			if t, ok := ms.Tokenizer.(tokenizer.Model); ok {
				wc.Sim.Tokenizer = t
			}
		}
		for _, a := range u.adapters {
			if a.Root == s.model {
				wc.Sim.Adapters = append(wc.Sim.Adapters, bus.Adapter{Name: a.Name, Root: "adapters/" + a.Name})
			}
		}
		wc.HTTPAddr = "127.0.0.1:0"
		// Each worker has its own connection and login, so the server
		// holds it to its own id as it would a worker on another host.
		wnc, err := connectBus(ctx, env.Stderr, bc.url, "switchyard-up-"+s.id, bc.workerOptions(s.id)...)
		if err != nil {
			return fail(ExitFail, err)
		}
		conns = append(conns, wnc)
		wc.NC, wc.Subjects, wc.RegistryTTL, wc.Logger = wnc, subj, u.bus.registryTTL, log
		wc.RegistryViaFrontend = bc.secret != nil || u.bus.login.hasLogin(os.Getenv)
		wc.KVEventsOff = i >= len(specs)-u.eventsOff
		if s.role == bus.RolePrefill {
			wc.LinkRate = rate
		}
		if u.engineWire != "" {
			wire := vllmpub.Config{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
				Layout: enginewire.Layout{ArrayEvents: u.wireArrays}, Quirks: u.wireQuirks}
			wire.Quirks.DropSeed = uint64(i) + 1 // each engine loses other events
			w, b, err := startBridged(ctx, wc, wire, bridge.Config{Subjects: subj, RegistryTTL: u.bus.registryTTL, Logger: log})
			if err != nil {
				return fail(ExitFail, err)
			}
			workers = append(workers, w)
			bridges = append(bridges, b)
			// The bridge registers the engine, with its events on; the
			// simulated engine behind it publishes nothing on NATS itself.
			entries = append(entries, b.Info())
			continue
		}
		w, err := node.StartWorker(ctx, wc)
		if err != nil {
			return fail(ExitFail, err)
		}
		workers = append(workers, w)
		entries = append(entries, w.Info())
	}
	if err := waitRoutable(ctx, fe, len(specs)); err != nil {
		return fail(ExitFail, err)
	}

	var lines []string
	for i, w := range workers {
		in := entries[i]
		note := ""
		if !in.KVEventsEnabled {
			note = "  [KV events OFF]"
		}
		if wire := w.Wire(); wire != nil {
			note += "  vLLM wire " + wire.Endpoint() + " (bridged)"
		}
		if in.KVXferAddr != "" {
			note += "  kvxfer " + in.KVXferAddr
			if rate > 0 {
				note += " (link " + rate.String() + ")"
			}
		}
		tiers := ""
		if p := w.Info().Profile; p.CPUBlocks > 0 { // the engine's own tiers
			tiers = fmt.Sprintf(" + %d in host memory", p.CPUBlocks)
			if p.DiskBlocks > 0 {
				tiers += fmt.Sprintf(" + %d on disk", p.DiskBlocks)
			}
		}
		note = tiers + note
		if len(u.models) > 1 {
			note += "  model " + in.Model
		}
		for _, a := range in.Adapters {
			note += "  lora " + a.Name
		}
		lines = append(lines, fmt.Sprintf("  %-10s %-10s %s  %d KV blocks%s", in.ID, in.Role, in.HTTPURL, in.KVBlocks, note))
	}
	xfer := ""
	if wtmpl.KVXferServerTLS != nil {
		xfer = ", kvxfer mutual TLS"
		if u.kvxferTLS == "auto" {
			xfer += " (auto certificates)"
		}
	}
	fmt.Fprintf(env.Stderr, "workers:\n%s\nNATS %s, router %s, disagg %s%s, tokenizer %s\n", strings.Join(lines, "\n"), natsURL, fcfg.Policy, fcfg.Disagg, xfer, tokName)
	auth := ""
	if fcfg.APIKey != "" {
		auth = ` -H "Authorization: Bearer $SWITCHYARD_API_KEY"`
	}
	fmt.Fprintf(env.Stdout, "Switchyard is ready: %s\n", fe.URL())
	fmt.Fprintf(env.Stdout, "Try:\n  curl -s %s/v1/chat/completions%s -H 'Content-Type: application/json' -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}],\"max_tokens\":16}'\n",
		fe.URL(), auth, u.models[0])
	fmt.Fprintln(env.Stderr, "Press Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Fprintf(env.Stderr, "stopping: draining the frontend and the workers (at most %v)...\n", fcfg.DrainTimeout)
	if left := fe.Drain(fcfg.DrainTimeout); left > 0 {
		fmt.Fprintf(env.Stderr, "drain timeout: %d client requests still open are cut\n", left)
	}
	for _, b := range bridges {
		b.Drain(context.Background(), fcfg.DrainTimeout)
	}
	for _, w := range workers {
		w.Drain(context.Background(), fcfg.DrainTimeout)
	}
	return ExitOK
}

func badUp(env Env, format string, a ...any) int {
	fmt.Fprintf(env.Stderr, "switchyard up: "+format+"\n", a...)
	return ExitUsage
}

// startBridged starts a simulated engine speaking vLLM's wire, stand-alone,
// and a bridge beside it that registers it on the bus.
func startBridged(ctx context.Context, wc node.WorkerConfig, wire vllmpub.Config, bc bridge.Config) (*node.Worker, *bridge.Bridge, error) {
	nc := wc.NC
	wc.NC = nil
	wc.EngineWire = &wire
	w, err := node.StartWorker(ctx, wc)
	if err != nil {
		return nil, nil, err
	}
	bc.ID, bc.Role, bc.Engine = wc.Sim.ID, wc.Sim.Role, bridge.EngineVLLM
	bc.EngineURL, bc.KVEvents, bc.KVReplay = w.URL(), w.Wire().Endpoint(), w.Wire().ReplayEndpoint()
	bc.BlockSize, bc.NC, bc.HTTPAddr = wc.Sim.BlockSize, nc, "127.0.0.1:0"
	bc.RegistryViaFrontend = wc.RegistryViaFrontend
	bc.WorkerKey = wc.WorkerKey // the engine's /v1 wants it, as the frontend's calls do
	bc.KVBytesPerToken = w.Info().KVBytesPerToken
	b, err := bridge.Start(ctx, bc)
	if err != nil {
		w.Close()
		return nil, nil, err
	}
	return w, b, nil
}

// waitRoutable waits until the frontend sees n workers in the registry,
// for at most a minute.
func waitRoutable(ctx context.Context, fe *node.Frontend, n int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return fe.WaitWorkers(ctx, n)
}

// randomKey returns 128 random bits in hex, for keys `up` makes itself.
func randomKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate a key: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// workerSplit is --workers: a total, or one count per model ("3,1").
type workerSplit struct {
	n     *int
	split *[]int
}

func (w *workerSplit) String() string {
	if w.n == nil {
		return ""
	}
	if len(*w.split) > 0 {
		var parts []string
		for _, k := range *w.split {
			parts = append(parts, strconv.Itoa(k))
		}
		return strings.Join(parts, ",")
	}
	return strconv.Itoa(*w.n)
}

func (w *workerSplit) Set(s string) error {
	*w.split, *w.n = nil, 0
	parts := strings.Split(s, ",")
	for _, p := range parts {
		k, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return fmt.Errorf("%q: want a count, or one per model: 3,1", s)
		}
		*w.n += k
		if len(parts) > 1 {
			*w.split = append(*w.split, k)
		}
	}
	return nil
}

// evenSplit shares n workers among k models, the remainder to the first.
func evenSplit(n, k int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = n / k
		if i < n%k {
			out[i]++
		}
	}
	return out
}
