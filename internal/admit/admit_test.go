package admit

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func newController(t testing.TB, slots int, cfg Config) *Controller {
	t.Helper()
	cfg.Capacity = func() int { return slots }
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func rejection(t testing.TB, err error, limit string) *Rejection {
	t.Helper()
	var r *Rejection
	if !errors.As(err, &r) {
		t.Fatalf("got %v, want a rejection by %s", err, limit)
	}
	if r.Limit != limit {
		t.Errorf("rejected by %s (%s), want %s", r.Limit, r.Msg, limit)
	}
	if r.RetryAfter < time.Second {
		t.Errorf("Retry-After %v, want at least 1s", r.RetryAfter)
	}
	return r
}

// TestShedAndQueue: with every slot taken a sheddable request is refused
// at once, a standard one waits and gets the slot the moment it frees,
// and one that waits out the queue timeout is refused with Retry-After.
func TestShedAndQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newController(t, 1, Config{QueueTimeout: 5 * time.Second})
		ctx := context.Background()
		first, err := c.Acquire(ctx, Request{Priority: Standard, Cost: 10})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Acquire(ctx, Request{Priority: Sheddable, Cost: 10})
		rejection(t, err, LimitShed)

		got := make(chan *Ticket)
		go func() {
			tk, err := c.Acquire(ctx, Request{Priority: Standard, Cost: 10})
			if err != nil {
				t.Error(err)
			}
			got <- tk
		}()
		synctest.Wait()
		if st := c.Stats(); st.Queued["standard"] != 1 || st.InUse != 1 {
			t.Fatalf("stats %+v, want one queued and one in use", st)
		}
		time.Sleep(2 * time.Second)
		first.Release()
		second := <-got
		if second.Waited != 2*time.Second {
			t.Errorf("waited %v, want 2s (admitted at the release)", second.Waited)
		}
		// The slot is held; the next one times out.
		start := time.Now()
		_, err = c.Acquire(ctx, Request{Priority: Standard, Cost: 10})
		rejection(t, err, LimitQueueTimeout)
		if el := time.Since(start); el != 5*time.Second {
			t.Errorf("timed out after %v, want 5s", el)
		}
		second.Release()
		second.Release() // idempotent
		if st := c.Stats(); st.InUse != 0 || st.Outcomes["shed"] != 1 || st.Outcomes["queue_timeout"] != 1 || st.Outcomes["queued"] != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

// TestPriorityOrder: a freed slot goes to the critical request queued
// last, before the standard ones queued earlier.
func TestPriorityOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newController(t, 1, Config{})
		ctx := context.Background()
		hold, _ := c.Acquire(ctx, Request{Priority: Standard})
		var order []string
		done := make(chan struct{}, 3)
		for _, p := range []Priority{Standard, Standard, Critical} {
			go func() {
				tk, err := c.Acquire(ctx, Request{Priority: p})
				if err != nil {
					t.Error(err)
					return
				}
				order = append(order, p.String()) // one ticket at a time: no race
				tk.Release()
				done <- struct{}{}
			}()
			synctest.Wait()
		}
		hold.Release()
		for range 3 {
			<-done
		}
		if strings.Join(order, ",") != "critical,standard,standard" {
			t.Errorf("admission order %v, want critical first", order)
		}
	})
}

// TestCriticalCapped: a tenant's priority is capped at its max_priority,
// so its "critical" request is queued as standard.
func TestCriticalCapped(t *testing.T) {
	ts := parseTenants(t, "tenants:\n  - {name: beta, key: kb}\n")
	beta := ts.ByKey("kb")
	if got := beta.Cap(Critical); got != Standard {
		t.Errorf("beta's critical capped to %v, want standard (the default max_priority)", got)
	}
	if got := ts.Default().Cap(Critical); got != Critical {
		t.Errorf("default tenant's critical capped to %v", got)
	}
}

// TestDisplaceFromFullQueue: at --max-queue a critical request displaces
// the newest standard one; a standard newcomer is refused.
func TestDisplaceFromFullQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newController(t, 1, Config{MaxQueue: 1})
		ctx := context.Background()
		hold, _ := c.Acquire(ctx, Request{Priority: Standard})
		res := make(chan error, 1)
		go func() {
			_, err := c.Acquire(ctx, Request{Priority: Standard})
			res <- err
		}()
		synctest.Wait()
		_, err := c.Acquire(ctx, Request{Priority: Standard})
		rejection(t, err, LimitQueueFull)
		crit := make(chan *Ticket, 1)
		go func() {
			tk, err := c.Acquire(ctx, Request{Priority: Critical})
			if err != nil {
				t.Error(err)
			}
			crit <- tk
		}()
		synctest.Wait()
		rejection(t, <-res, LimitQueueFull)
		hold.Release()
		(<-crit).Release()
	})
}

// TestCancelWhileQueued: a client that leaves the queue takes nothing:
// the slot goes to the next request.
func TestCancelWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newController(t, 1, Config{})
		hold, _ := c.Acquire(context.Background(), Request{Priority: Standard})
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() {
			_, err := c.Acquire(ctx, Request{Priority: Standard})
			res <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled wait: %v", err)
		}
		hold.Release()
		if st := c.Stats(); st.InUse != 0 || st.Queued["standard"] != 0 {
			t.Errorf("stats after cancel %+v, want nothing in use or queued", st)
		}
	})
}

// TestCapacityGrows: a waiting request is admitted when capacity grows
// (a worker joined) with no release.
func TestCapacityGrows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slots atomic.Int64
		slots.Store(1)
		c, err := New(Config{Capacity: func() int { return int(slots.Load()) }})
		if err != nil {
			t.Fatal(err)
		}
		hold, _ := c.Acquire(context.Background(), Request{Priority: Standard})
		defer hold.Release()
		got := make(chan error, 1)
		go func() {
			tk, err := c.Acquire(context.Background(), Request{Priority: Standard})
			tk.Release()
			got <- err
		}()
		synctest.Wait()
		slots.Store(2)
		if err := <-got; err != nil {
			t.Error(err)
		}
		slots.Store(0)
		_, err = c.Acquire(context.Background(), Request{Priority: Standard})
		rejection(t, err, LimitUnavailable)
	})
}

// TestRateLimit: at 60 requests a minute the 61st is refused with the
// x-ratelimit headers; a second later one more fits.
func TestRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := parseTenants(t, "tenants:\n  - name: alpha\n    key: ka\n    requests_per_minute: 60\n    tokens_per_minute: 100000\n")
		c := newController(t, -1, Config{Tenants: ts})
		alpha := ts.ByKey("ka")
		for i := range 60 {
			tk, err := c.Acquire(context.Background(), Request{Tenant: alpha, Cost: 100})
			if err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			tk.Release()
			if i == 0 && tk.RateLimits.Requests.Remaining != 59 {
				t.Errorf("first request: remaining %d, want 59", tk.RateLimits.Requests.Remaining)
			}
		}
		_, err := c.Acquire(context.Background(), Request{Tenant: alpha, Cost: 100})
		r := rejection(t, err, LimitRequests)
		h := http.Header{}
		r.RateLimits.SetHeaders(h)
		want := map[string]string{
			"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s",
			"x-ratelimit-limit-tokens": "100000", "x-ratelimit-remaining-tokens": "94000", "x-ratelimit-reset-tokens": "3.6s",
		}
		for k, v := range want {
			if got := h.Get(k); got != v {
				t.Errorf("%s: %q, want %q", k, got, v)
			}
		}
		if r.RetryAfter != time.Second {
			t.Errorf("Retry-After %v, want 1s (one request refills in a second)", r.RetryAfter)
		}
		time.Sleep(time.Second)
		if _, err := c.Acquire(context.Background(), Request{Tenant: alpha, Cost: 100}); err != nil {
			t.Errorf("a second later: %v", err)
		}
	})
}

// TestMaxConcurrency: a tenant at max_concurrency waits while another
// tenant's request takes the free slot.
func TestMaxConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := parseTenants(t, "tenants:\n  - {name: a, key: ka, max_concurrency: 1}\n  - {name: b, key: kb}\n")
		c := newController(t, 4, Config{Tenants: ts})
		a, b := ts.ByKey("ka"), ts.ByKey("kb")
		first, _ := c.Acquire(context.Background(), Request{Tenant: a, Priority: Standard})
		got := make(chan *Ticket, 1)
		go func() {
			tk, _ := c.Acquire(context.Background(), Request{Tenant: a, Priority: Standard})
			got <- tk
		}()
		synctest.Wait()
		if _, err := c.Acquire(context.Background(), Request{Tenant: b, Priority: Standard}); err != nil {
			t.Errorf("b with slots free: %v", err)
		}
		select {
		case <-got:
			t.Fatal("a's second request admitted beyond max_concurrency 1")
		default:
		}
		first.Release()
		(<-got).Release()
	})
}

func parseTenants(t testing.TB, text string) *Tenants {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := LoadTenants(p)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestBadTenantsFile: every mistake names the file, the line and the key.
func TestBadTenantsFile(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"unknown key", "tenants:\n  - name: a\n    key: k\n    wieght: 2\n", ":4: tenants[0].wieght: field wieght not found"},
		{"wrong type", "tenants:\n  - name: a\n    key: k\n    weight: heavy\n", ":4: tenants[0].weight: cannot unmarshal"},
		{"no key", "tenants:\n  - name: a\n    weight: 1\n", ":2: tenants[0].key: tenant \"a\" needs key or key_sha256"},
		{"bad weight", "tenants:\n  - name: a\n    key: k\n    weight: 0\n", ":4: tenants[0].weight: 0: want a number in (0, 1000]"},
		{"bad priority", "tenants:\n  - name: a\n    key: k\n    max_priority: urgent\n", ":4: tenants[0].max_priority: \"urgent\""},
		{"duplicate", "tenants:\n  - {name: a, key: k}\n  - {name: a, key: j}\n", ":3: tenants[1].name: tenant \"a\" is listed twice"},
		{"same key", "tenants:\n  - {name: a, key: k}\n  - {name: b, key: k}\n", ":3: tenants[1].key: tenant \"b\" has the same key as \"a\""},
		{"bad hash", "tenants:\n  - {name: a, key_sha256: xyz}\n", ":2: tenants[0].key_sha256: want 64 hex digits"},
		{"empty", "tenants: []\n", ":1: tenants: list at least one tenant"},
		{"negative limit", "tenants:\n  - name: a\n    key: k\n    requests_per_minute: -1\n", ":4: tenants[0].requests_per_minute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tenants.yaml")
			if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadTenants(p)
			if err == nil || !strings.Contains(err.Error(), p+tc.want) {
				t.Errorf("got %v, want %q after the file name", err, tc.want)
			}
		})
	}
}

// TestCacheSalt: isolated tenants get distinct, key-derived salts;
// sharing tenants and the default keep the client's.
func TestCacheSalt(t *testing.T) {
	ts := parseTenants(t, "tenants:\n  - {name: a, key: ka}\n  - {name: b, key: kb}\n  - {name: s, key: ks, share_cache: true}\n")
	a, _ := ts.ByKey("ka").CacheSalt("")
	b, _ := ts.ByKey("kb").CacheSalt("")
	a2, _ := ts.ByKey("ka").CacheSalt("x")
	if a == b || a == a2 || a == "" {
		t.Errorf("salts a=%q b=%q a(x)=%q: want distinct and set", a, b, a2)
	}
	if s, changed := ts.ByKey("ks").CacheSalt("x"); s != "x" || changed {
		t.Errorf("sharing tenant: salt %q changed %v, want the client's", s, changed)
	}
	if s, changed := ts.Default().CacheSalt("y"); s != "y" || changed {
		t.Errorf("default tenant: salt %q changed %v", s, changed)
	}
	if ts.ByKey("nope") != nil || ts.ByKey("") != nil {
		t.Errorf("unknown key matched a tenant")
	}
}
