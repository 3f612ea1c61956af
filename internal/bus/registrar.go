package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/prom"
)

// A worker that logs in with its own credentials has no JetStream API at
// all: JetStream answers a request on whatever reply subject the request
// names, and the stream captures what lands on its subjects, whoever
// publishes it. A worker allowed a direct get could have the server
// deliver its own registry value to the frontends' subject (one worker
// switching every frontend's routing policy); allowed even a KV put, it
// could aim the acknowledgement at another worker's registry key or event
// subject. So a worker registers, deregisters and reads entries through a
// frontend: it sends a request on its own registrar subject
// (Subjects.Registrar), a frontend's Registrar checks that the entry names
// the subject's worker and that the reply goes to that worker's own inbox,
// does the JetStream work with its own rights, and answers.

// registrarQueue makes one frontend of many handle each request.
const registrarQueue = "switchyard-registrar"

// registrarParallel bounds the requests a registrar serves at once: each
// waits on a JetStream round trip, and one slow one (a bus under strain)
// must not hold up every other worker's refresh. When all are busy the
// subscription waits, which NATS buffers.
const registrarParallel = 32

// registrarPerWorker bounds one worker's requests in service at once: a
// worker waits for each answer (its refresh loop has one in flight, a
// decode worker one per KV pull it vets), so more is a flood, and one
// worker's flood must not take the slots every other worker refreshes
// through. Requests over it are refused unanswered.
const registrarPerWorker = 8

// registrarMaxRequest bounds a request: an entry is well under 4 KiB.
const registrarMaxRequest = 64 << 10

// relayTimeout bounds one relayed request: a frontend answers in a
// JetStream round trip, milliseconds.
const relayTimeout = 2 * time.Second

// Registrar operations.
const (
	opHello  = "hello" // is a frontend there, and what TTL is in force
	opPut    = "put"
	opDelete = "delete"
	opGet    = "get"
)

type registrarRequest struct {
	Op    string          `json:"op"`
	Entry json.RawMessage `json:"entry,omitempty"` // put: the WorkerInfo
	ID    string          `json:"id,omitempty"`    // get: whose entry
}

type registrarReply struct {
	TTLMillis int64       `json:"ttl_ms"`
	Found     bool        `json:"found,omitempty"`
	Entry     *WorkerInfo `json:"entry,omitempty"`
	Error     string      `json:"error,omitempty"`
}

// Registrar serves workers' registry requests for a frontend (see
// StartRegistrar). Unsubscribing its Subscription stops it.
type Registrar struct {
	r       *Registry
	prefix  string
	sub     *nats.Subscription
	refused atomic.Uint64
	slots   chan struct{} // registrarParallel

	busyMu sync.Mutex     // guards busy
	busy   map[string]int // requests in service per worker

	logMu   sync.Mutex // guards logLast
	logLast time.Time
}

// StartRegistrar serves registry requests from every worker of the
// namespace: puts, deletes and reads of registry entries, each checked
// against the worker its subject names. Frontends run one each; they share
// the requests. A request is refused (counted, logged, and unanswered when
// the reply subject is at fault) when its reply subject is not the
// worker's own inbox, when a put's entry names another worker, or when it
// does not decode.
func (r *Registry) StartRegistrar() (*Registrar, error) {
	if r.viaFrontend {
		return nil, errors.New("bus: registrar: a worker's registry cannot serve other workers")
	}
	g := &Registrar{r: r, prefix: r.subj.RegistrarPrefix(), slots: make(chan struct{}, registrarParallel), busy: map[string]int{}}
	sub, err := r.nc.QueueSubscribe(r.subj.RegistrarAll(), registrarQueue, func(m *nats.Msg) {
		id, _ := strings.CutPrefix(m.Subject, g.prefix)
		if !g.take(id) {
			g.refuse(m.Subject, fmt.Sprintf("worker %s has %d registry requests in service already", id, registrarPerWorker))
			return
		}
		// A worker waits for each answer before its next request, so
		// serving requests side by side keeps each worker's in order.
		g.slots <- struct{}{}
		go func() {
			defer func() { <-g.slots; g.release(id) }()
			g.handle(m)
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("bus: registrar: subscribe %s: %w", r.subj.RegistrarAll(), err)
	}
	g.sub = sub
	return g, nil
}

// take books one of id's registrarPerWorker requests; false if all are
// in service.
func (g *Registrar) take(id string) bool {
	g.busyMu.Lock()
	defer g.busyMu.Unlock()
	if g.busy[id] >= registrarPerWorker {
		return false
	}
	g.busy[id]++
	return true
}

func (g *Registrar) release(id string) {
	g.busyMu.Lock()
	defer g.busyMu.Unlock()
	if g.busy[id]--; g.busy[id] <= 0 {
		delete(g.busy, id)
	}
}

// Subscription is the registrar's subscription: unsubscribing it stops
// the registrar.
func (g *Registrar) Subscription() *nats.Subscription { return g.sub }

// Refused counts requests refused for naming another worker, a reply
// subject other than the worker's inbox, or for not decoding.
func (g *Registrar) Refused() uint64 { return g.refused.Load() }

// Register adds switchyard_bus_registrar_refused_total to reg.
func (g *Registrar) Register(reg prometheus.Registerer) error {
	return prom.Register(reg, "bus", prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "switchyard_bus_registrar_refused_total",
		Help: "Worker registry requests refused: another worker's entry, a reply subject not the worker's inbox, or undecodable.",
	}, func() float64 { return float64(g.refused.Load()) }))
}

func (g *Registrar) refuse(subject, why string) {
	g.refused.Add(1)
	now := time.Now()
	g.logMu.Lock()
	defer g.logMu.Unlock()
	if now.Sub(g.logLast) < 5*time.Second {
		return
	}
	g.logLast = now
	g.r.log.Warn("worker registry request refused", "subject", subject, "why", why)
}

// handle serves one request; up to registrarParallel run at once.
func (g *Registrar) handle(m *nats.Msg) {
	id, _ := strings.CutPrefix(m.Subject, g.prefix)
	if ValidateName("worker id", id) != nil {
		g.refuse(m.Subject, "the subject names no worker")
		return
	}
	// The answer goes only to the worker's own inbox: any other reply
	// subject would make this frontend publish for the worker where the
	// worker itself may not.
	if !strings.HasPrefix(m.Reply, WorkerInboxPrefix(id)+".") {
		g.refuse(m.Subject, fmt.Sprintf("reply subject %q is not worker %s's inbox", m.Reply, id))
		return
	}
	reply := g.serve(id, m)
	if reply.Error != "" {
		g.refuse(m.Subject, reply.Error)
	}
	reply.TTLMillis = g.r.ttl.Milliseconds()
	data, _ := json.Marshal(reply)
	_ = m.Respond(data) // a worker that went away needs no answer
}

func (g *Registrar) serve(id string, m *nats.Msg) registrarReply {
	var req registrarRequest
	if len(m.Data) > registrarMaxRequest {
		return registrarReply{Error: fmt.Sprintf("request of %d bytes, over %d", len(m.Data), registrarMaxRequest)}
	}
	if err := json.Unmarshal(m.Data, &req); err != nil {
		return registrarReply{Error: "request does not decode: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	switch req.Op {
	case opHello:
		return registrarReply{}
	case opPut:
		var info WorkerInfo
		if err := json.Unmarshal(req.Entry, &info); err != nil {
			return registrarReply{Error: "entry does not decode: " + err.Error()}
		}
		if info.ID != id {
			return registrarReply{Error: fmt.Sprintf("entry of worker %q sent by worker %s", info.ID, id)}
		}
		if err := g.r.put(ctx, id, req.Entry); err != nil {
			return registrarReply{Error: fmt.Sprintf("bus: put %s: %v", id, err)}
		}
		return registrarReply{}
	case opDelete:
		if err := g.r.bucket().Delete(ctx, id); err != nil {
			return registrarReply{Error: fmt.Sprintf("bus: delete %s: %v", id, err)}
		}
		return registrarReply{}
	case opGet:
		info, ok, err := g.r.Get(ctx, req.ID)
		if err != nil {
			return registrarReply{Error: err.Error()}
		}
		if !ok {
			return registrarReply{}
		}
		return registrarReply{Found: true, Entry: &info}
	}
	return registrarReply{Error: fmt.Sprintf("unknown op %q", req.Op)}
}

// errNoRegistrar says no frontend serves registry requests (yet).
var errNoRegistrar = errors.New("bus: no frontend answers registry requests")

// relay sends req on worker id's registrar subject and waits for the
// answer on its own inbox, at most relayTimeout.
func (r *Registry) relay(ctx context.Context, id string, req registrarRequest) (registrarReply, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return registrarReply{}, fmt.Errorf("bus: encode registry request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	// A reply subscription of its own rather than the connection's inbox:
	// the registrar answers only under WorkerInboxPrefix(id), whatever
	// prefix the connection was given.
	sub, err := r.nc.SubscribeSync(WorkerInboxPrefix(id) + ".reg." + nuid.Next())
	if err != nil {
		return registrarReply{}, fmt.Errorf("bus: registry reply subscription: %w", err)
	}
	defer sub.Unsubscribe()
	if err := r.nc.PublishRequest(r.subj.Registrar(id), sub.Subject, data); err != nil {
		return registrarReply{}, fmt.Errorf("bus: registry request: %w", err)
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return registrarReply{}, fmt.Errorf("%w on %s: %w", errNoRegistrar, r.subj.Registrar(id), err)
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return registrarReply{}, fmt.Errorf("%w on %s", errNoRegistrar, r.subj.Registrar(id))
	}
	var rep registrarReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return registrarReply{}, fmt.Errorf("bus: registry reply does not decode: %w", err)
	}
	if rep.Error != "" {
		return rep, fmt.Errorf("bus: the frontend refused the registry request: %s", rep.Error)
	}
	return rep, nil
}

// openViaFrontend waits, up to BucketWait, for a frontend to answer, and
// takes the TTL in force from it.
func (r *Registry) openViaFrontend(ctx context.Context) error {
	deadline := time.Now().Add(BucketWait)
	for {
		rep, err := r.relay(ctx, r.self, registrarRequest{Op: opHello})
		if err == nil {
			if rep.TTLMillis > 0 {
				r.ttl = time.Duration(rep.TTLMillis) * time.Millisecond
			}
			return nil
		}
		if !errors.Is(err, errNoRegistrar) || time.Now().After(deadline) {
			return fmt.Errorf("%w: the frontend serves the registry to workers; start the frontend, on the same --namespace, first", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(retryEvery):
		}
	}
}
