package admit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Limits a request can be refused by (Rejection.Limit).
const (
	LimitShed         = "shed"                // sheddable and would have to wait
	LimitQueueFull    = "max_queue"           // the queue holds --max-queue requests
	LimitQueueTimeout = "queue_timeout"       // waited --queue-timeout
	LimitRequests     = "requests_per_minute" // the tenant's request rate
	LimitTokens       = "tokens_per_minute"   // the tenant's token rate
	LimitUnavailable  = "no_capacity"         // no worker can serve at all
)

// Rejection is a request refused admission. Limit says which limit was
// hit; every one but LimitUnavailable is a 429, that one a 503.
type Rejection struct {
	Limit      string
	RetryAfter time.Duration // at least 1 s
	Msg        string
	RateLimits RateLimits // the tenant's limits, when it has any
}

func (r *Rejection) Error() string { return r.Msg }

// Request is what admission knows of one request.
type Request struct {
	Tenant   *Tenant // nil: the default tenant
	Priority Priority
	// Cost is the request's estimated size in tokens (prompt plus
	// max_tokens): what fair queueing shares and tokens_per_minute counts.
	Cost int
	// Fleet, when Known, is what Config's Serving and Capacity would say
	// now, read by the caller from the worker list it took for this
	// request: Acquire uses it rather than have Config walk the fleet
	// again. Dispatches on release still ask Config.
	Fleet Fleet
}

// Fleet is a caller's reading of Config.Serving and Config.Capacity.
type Fleet struct {
	Known    bool
	Serving  bool
	Capacity int
}

// Config configures a Controller.
type Config struct {
	// Capacity returns how many requests may be admitted at once (every
	// candidate worker's free slots, summed), or a negative number for no
	// bound. It is called under the Controller's lock, on every arrival
	// and release, so it must be cheap and must not call the Controller.
	Capacity func() int
	// Serving reports whether any worker can serve at all; when it says
	// no, requests are refused as LimitUnavailable rather than queued.
	// nil: Capacity() != 0. It is called under the lock, like Capacity.
	Serving func() bool
	// MaxQueue bounds queued requests; one more is refused unless it
	// outranks a queued one, which it then displaces. Default 1024.
	MaxQueue int
	// QueueTimeout is the longest a request waits; default 30 s.
	QueueTimeout time.Duration
	// Quantum is the tokens a tenant of weight 1 may dequeue per round of
	// deficit round robin. Default 64, below any request's cost: a round
	// then dequeues at most about one request per tenant, so a tenant with
	// few requests queued (its queue empties within a turn, and DRR
	// forgets an empty flow's credit) is not outrun by one with many. With
	// a 4096-token quantum, 280-token requests measured 2.4:1 for the
	// tenant with 4x the streams. Small rounds cost nothing: pop skips
	// rounds in which no flow could pay.
	Quantum  int
	Tenants  *Tenants              // nil: one default tenant
	Registry prometheus.Registerer // nil: no metrics
	// Recheck is how often a waiting request looks at Capacity again
	// without a release (a worker joined); default 100 ms.
	Recheck time.Duration
}

// Controller admits requests while capacity lasts and queues the rest
// fairly (see fairQueue). Safe for concurrent use; it starts no goroutines.
type Controller struct {
	cfg Config
	m   *metrics

	mu        sync.Mutex // guards the fields below
	q         *fairQueue
	inUse     int
	byTenant  map[string]int     // admitted requests per tenant
	limiters  map[string]*limits // per tenant with a rate limit
	drain     rateMeter
	lastCheck time.Time // the last recheck's dispatch

	countMu sync.Mutex        // guards counts; taken with or without mu
	counts  map[string]uint64 // outcomes, for Stats

	tenants map[string]*Tenant // by name; read-only after New
}

type limits struct{ req, tok *bucket }

// New validates cfg and builds a Controller.
func New(cfg Config) (*Controller, error) {
	if cfg.Capacity == nil {
		return nil, fmt.Errorf("admit: config: Capacity is required")
	}
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = 1024
	}
	if cfg.QueueTimeout == 0 {
		cfg.QueueTimeout = 30 * time.Second
	}
	if cfg.Quantum == 0 {
		cfg.Quantum = 64
	}
	if cfg.Recheck == 0 {
		cfg.Recheck = 100 * time.Millisecond
	}
	if cfg.MaxQueue < 0 || cfg.QueueTimeout < 0 || cfg.Quantum < 0 || cfg.Recheck < 0 {
		return nil, fmt.Errorf("admit: config: max queue %d, queue timeout %v, quantum %d: none may be negative", cfg.MaxQueue, cfg.QueueTimeout, cfg.Quantum)
	}
	c := &Controller{cfg: cfg, byTenant: map[string]int{}, limiters: map[string]*limits{}, counts: map[string]uint64{}}
	c.tenants = map[string]*Tenant{}
	for _, t := range cfg.Tenants.List() {
		c.tenants[t.Name] = t
	}
	c.q = newFairQueue(float64(cfg.Quantum), func(name string) float64 { return c.tenant(name).Weight })
	if cfg.Registry != nil {
		m, err := newMetrics(cfg.Registry, c)
		if err != nil {
			return nil, err
		}
		c.m = m
	}
	return c, nil
}

// Ticket is an admitted request's slot. Release it when the request is
// done; Release is idempotent.
type Ticket struct {
	c      *Controller
	tenant string
	once   sync.Once
	// Waited is how long the request queued (0: admitted at once).
	Waited time.Duration
	// RateLimits are the tenant's limits after this request, for the
	// response's x-ratelimit-* headers.
	RateLimits RateLimits
}

// Release gives the slot back, admitting the next queued request.
func (t *Ticket) Release() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		c := t.c
		c.mu.Lock()
		defer c.mu.Unlock()
		c.inUse--
		if c.byTenant[t.tenant]--; c.byTenant[t.tenant] <= 0 {
			delete(c.byTenant, t.tenant)
		}
		c.drain.add(time.Now())
		c.dispatch()
	})
}

// Acquire admits r, waiting in the fair queue if every slot is taken. It
// returns a *Rejection when r is refused (sheddable and would wait, rate
// limited, the queue full or its wait over QueueTimeout, no capacity at
// all), or ctx's error when ctx ends first.
func (c *Controller) Acquire(ctx context.Context, r Request) (*Ticket, error) {
	t := r.Tenant
	if t == nil {
		t = c.cfg.Tenants.Default()
	}
	prio := t.Cap(r.Priority)
	cost := float64(max(1, r.Cost))
	now := time.Now()

	c.mu.Lock()
	serving := r.Fleet.Serving
	if !r.Fleet.Known {
		serving = c.serving()
	}
	if !serving {
		c.mu.Unlock()
		return nil, c.reject(t.Name, prio, &Rejection{Limit: LimitUnavailable, RetryAfter: time.Second,
			Msg: "admit: no worker can take requests (none serving, or all draining)"})
	}
	rl, rej := c.takeRate(t, cost, now)
	if rej != nil {
		c.mu.Unlock()
		return nil, c.reject(t.Name, prio, rej)
	}
	w := &waiter{tenant: t.Name, prio: prio, cost: cost, enq: now, done: make(chan struct{})}
	c.q.push(w)
	if r.Fleet.Known {
		c.dispatchWith(r.Fleet.Capacity)
	} else {
		c.dispatch()
	}
	if w.admitted {
		c.mu.Unlock()
		return c.ticket(t.Name, prio, w, rl, "admitted"), nil
	}
	if prio == Sheddable {
		c.q.remove(w)
		retry := c.retryAfter(c.q.len()+1, now)
		c.m.depth(c)
		c.mu.Unlock()
		return nil, c.reject(t.Name, prio, &Rejection{Limit: LimitShed, RetryAfter: retry, RateLimits: rl,
			Msg: fmt.Sprintf("admit: every worker is busy and sheddable requests do not queue; retry after %v", retry)})
	}
	if c.q.len() > c.cfg.MaxQueue {
		victim := c.q.evict(prio)
		if victim == nil {
			c.q.remove(w)
			retry := c.retryAfter(c.q.len(), now)
			c.m.depth(c)
			c.mu.Unlock()
			return nil, c.reject(t.Name, prio, &Rejection{Limit: LimitQueueFull, RetryAfter: retry, RateLimits: rl,
				Msg: fmt.Sprintf("admit: %d requests queued, the --max-queue limit; retry after %v", c.cfg.MaxQueue, retry)})
		}
		victim.err = c.reject(victim.tenant, victim.prio, &Rejection{Limit: LimitQueueFull, RetryAfter: c.retryAfter(c.q.len(), now),
			Msg: fmt.Sprintf("admit: displaced from the full queue (%d requests, the --max-queue limit) by a %s request", c.cfg.MaxQueue, prio)})
		close(victim.done)
	}
	c.m.depth(c)
	c.mu.Unlock()

	timeout := time.NewTimer(c.cfg.QueueTimeout)
	defer timeout.Stop()
	tick := time.NewTicker(c.cfg.Recheck)
	defer tick.Stop()
	for {
		select {
		case <-w.done:
			if w.err != nil {
				return nil, w.err
			}
			return c.ticket(t.Name, prio, w, rl, "queued"), nil
		case <-tick.C:
			c.recheck()
		case <-timeout.C:
			if tk, err := c.leave(w, t.Name, prio, rl, nil); tk != nil || err != nil {
				return tk, err
			}
		case <-ctx.Done():
			if _, err := c.leave(w, t.Name, prio, rl, ctx.Err()); err != nil {
				return nil, err
			}
		}
	}
}

// recheck looks at Capacity again for the queue, at most once per
// Recheck however many requests wait: every waiter ticks, and a deep
// queue must not turn into thousands of capacity checks a second.
func (c *Controller) recheck() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); now.Sub(c.lastCheck) >= c.cfg.Recheck {
		c.lastCheck = now
		c.dispatch()
	}
}

// leave takes w out of the queue on its timeout (cause nil) or its
// context's end. If w was admitted meanwhile, a timed-out waiter takes
// its ticket and a cancelled one gives it back.
func (c *Controller) leave(w *waiter, tenant string, prio Priority, rl RateLimits, cause error) (*Ticket, error) {
	c.mu.Lock()
	if !c.q.remove(w) {
		c.mu.Unlock()
		<-w.done // admitted or evicted just now
		if w.err != nil {
			return nil, w.err
		}
		tk := c.ticket(tenant, prio, w, rl, "queued")
		if cause != nil {
			tk.Release()
			return nil, cause
		}
		return tk, nil
	}
	now := time.Now()
	retry := c.retryAfter(c.q.len()+1, now)
	c.m.depth(c)
	c.mu.Unlock()
	c.m.wait(now.Sub(w.enq))
	if cause != nil {
		c.count(tenant, prio, "canceled")
		return nil, cause
	}
	return nil, c.reject(tenant, prio, &Rejection{Limit: LimitQueueTimeout, RetryAfter: retry, RateLimits: rl,
		Msg: fmt.Sprintf("admit: waited %v in the queue, the --queue-timeout limit, without a free worker; retry after %v", c.cfg.QueueTimeout, retry)})
}

func (c *Controller) serving() bool {
	if c.cfg.Serving != nil {
		return c.cfg.Serving()
	}
	return c.cfg.Capacity() != 0
}

// dispatch admits queued requests while there is room. c.mu is held.
func (c *Controller) dispatch() {
	if c.q.len() == 0 {
		return
	}
	// Capacity walks the workers: asked once per dispatch, as only this
	// loop changes inUse meanwhile.
	c.dispatchWith(c.cfg.Capacity())
}

// dispatchWith is dispatch with the capacity known. c.mu is held.
func (c *Controller) dispatchWith(capacity int) {
	if c.q.len() == 0 {
		return
	}
	eligible := c.eligible
	for {
		if capacity >= 0 && c.inUse >= capacity {
			break
		}
		w := c.q.pop(eligible)
		if w == nil {
			break
		}
		c.inUse++
		c.byTenant[w.tenant]++
		w.admitted = true
		close(w.done)
	}
	c.m.depth(c)
}

// eligible reports whether tenant may have one more request admitted
// (its max_concurrency). c.mu is held.
func (c *Controller) eligible(tenant string) bool {
	t := c.tenant(tenant)
	return t.MaxConcurrency <= 0 || c.byTenant[tenant] < t.MaxConcurrency
}

func (c *Controller) tenant(name string) *Tenant {
	if t, ok := c.tenants[name]; ok {
		return t
	}
	return c.cfg.Tenants.Default()
}

// takeRate charges the tenant's rate limits one request of cost tokens.
// c.mu is held.
func (c *Controller) takeRate(t *Tenant, cost float64, now time.Time) (RateLimits, *Rejection) {
	if t.RequestsPerMinute <= 0 && t.TokensPerMinute <= 0 {
		return RateLimits{}, nil
	}
	l := c.limiters[t.Name]
	if l == nil {
		l = &limits{}
		if t.RequestsPerMinute > 0 {
			l.req = newBucket(t.RequestsPerMinute, now)
		}
		if t.TokensPerMinute > 0 {
			l.tok = newBucket(t.TokensPerMinute, now)
		}
		c.limiters[t.Name] = l
	}
	var wait time.Duration
	limit := ""
	if l.req != nil {
		l.req.refill(now)
		if d := l.req.wait(1); d > 0 {
			wait, limit = d, LimitRequests
		}
	}
	if l.tok != nil {
		l.tok.refill(now)
		if cost > l.tok.perMinute {
			cost = l.tok.perMinute // one request may use the whole minute, never more
		}
		if d := l.tok.wait(cost); d > wait {
			wait, limit = d, LimitTokens
		}
	}
	if limit == "" {
		if l.req != nil {
			l.req.level--
		}
		if l.tok != nil {
			l.tok.level -= cost
		}
	}
	var rl RateLimits
	if l.req != nil {
		rl.Requests = l.req.status()
	}
	if l.tok != nil {
		rl.Tokens = l.tok.status()
	}
	if limit == "" {
		return rl, nil
	}
	retry := time.Duration(math.Ceil(wait.Seconds())) * time.Second
	msg := fmt.Sprintf("admit: tenant %s is over its %s (%d); retry after %v", t.Name, limit, t.RequestsPerMinute, retry)
	if limit == LimitTokens {
		msg = fmt.Sprintf("admit: tenant %s is over its %s (%d, this request counts %.0f: prompt and max_tokens); retry after %v", t.Name, limit, t.TokensPerMinute, cost, retry)
	}
	return rl, &Rejection{Limit: limit, RetryAfter: retry, RateLimits: rl, Msg: msg}
}

// retryAfter estimates when ahead queued requests will have left, from
// the measured drain rate: whole seconds in [1, 60].
func (c *Controller) retryAfter(ahead int, now time.Time) time.Duration {
	rate := c.drain.rate(now)
	if rate <= 0 {
		return time.Second
	}
	s := math.Ceil(float64(ahead) / rate)
	return time.Duration(min(60, max(1, s))) * time.Second
}

func (c *Controller) ticket(tenant string, prio Priority, w *waiter, rl RateLimits, outcome string) *Ticket {
	tk := &Ticket{c: c, tenant: tenant, RateLimits: rl}
	if outcome == "queued" {
		tk.Waited = time.Since(w.enq)
	}
	c.m.wait(tk.Waited)
	c.count(tenant, prio, outcome)
	return tk
}

func (c *Controller) reject(tenant string, prio Priority, r *Rejection) *Rejection {
	c.count(tenant, prio, r.Limit)
	return r
}

// count records an outcome; callers may hold c.mu.
func (c *Controller) count(tenant string, prio Priority, outcome string) {
	c.m.admission(tenant, prio, outcome)
	c.countMu.Lock()
	c.counts[outcome]++
	c.countMu.Unlock()
}
