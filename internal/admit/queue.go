package admit

import (
	"container/list"
	"math"
	"slices"
	"time"
)

// waiter is one queued request.
type waiter struct {
	tenant string
	prio   Priority
	cost   float64 // estimated tokens; at least 1
	enq    time.Time

	// Set under Controller.mu when the waiter leaves the queue: admitted,
	// or refused (evicted by a higher priority from a full queue).
	done     chan struct{} // closed when it leaves the queue
	admitted bool
	err      error
}

// flow is one tenant's FIFO of waiters within a priority.
type flow struct {
	tenant  string
	items   []*waiter
	deficit float64 // tokens it may still dequeue this round
	turn    bool    // its quantum for the current turn was added
	elem    *list.Element
}

// class is one priority level: deficit round robin over tenant flows.
type class struct {
	flows map[string]*flow
	ring  *list.List // of *flow with waiters; the front has the turn
	n     int
}

// fairQueue orders waiters: strictly by priority, and within a priority
// by deficit round robin (Shreedhar and Varghese, 1996) on the waiters'
// estimated cost in tokens, each tenant's quantum scaled by its weight, so
// backlogged tenants dequeue tokens in proportion to their weights however
// many requests each sends. It is not safe for concurrent use
// (Controller.mu guards it).
type fairQueue struct {
	quantum float64 // tokens per round at weight 1
	weight  func(tenant string) float64
	classes [numPriorities]class
}

func newFairQueue(quantum float64, weight func(string) float64) *fairQueue {
	q := &fairQueue{quantum: quantum, weight: weight}
	for i := range q.classes {
		q.classes[i] = class{flows: map[string]*flow{}, ring: list.New()}
	}
	return q
}

func (q *fairQueue) len() int {
	n := 0
	for i := range q.classes {
		n += q.classes[i].n
	}
	return n
}

func (q *fairQueue) lenAt(p Priority) int { return q.classes[p].n }

func (q *fairQueue) push(w *waiter) {
	c := &q.classes[w.prio]
	f := c.flows[w.tenant]
	if f == nil {
		f = &flow{tenant: w.tenant}
		c.flows[w.tenant] = f
	}
	if len(f.items) == 0 {
		// A flow that went idle starts afresh: DRR gives no credit for
		// time spent with nothing to send.
		f.deficit, f.turn = 0, false
		f.elem = c.ring.PushBack(f)
	}
	f.items = append(f.items, w)
	c.n++
}

// remove takes w out of the queue (timed out, cancelled or evicted); it
// reports false if w was not queued.
func (q *fairQueue) remove(w *waiter) bool {
	c := &q.classes[w.prio]
	f := c.flows[w.tenant]
	if f == nil {
		return false
	}
	i := slices.Index(f.items, w)
	if i < 0 {
		return false
	}
	f.items = slices.Delete(f.items, i, i+1)
	c.n--
	if len(f.items) == 0 {
		c.ring.Remove(f.elem)
		f.elem = nil
	}
	return true
}

// pop dequeues the next waiter whose tenant eligible allows (nil: all), or
// returns nil when none may go. Higher priorities go first.
func (q *fairQueue) pop(eligible func(tenant string) bool) *waiter {
	for p := numPriorities - 1; p >= 0; p-- {
		if w := q.popClass(&q.classes[p], eligible); w != nil {
			return w
		}
	}
	return nil
}

func (q *fairQueue) popClass(c *class, eligible func(string) bool) *waiter {
	if c.n == 0 {
		return nil
	}
	for {
		// One pass over the ring: serve the first flow whose deficit
		// covers its head, adding each flow's quantum as its turn starts.
		var any bool
		for range c.ring.Len() {
			f := c.ring.Front().Value.(*flow)
			if eligible != nil && !eligible(f.tenant) {
				c.ring.MoveToBack(f.elem)
				continue
			}
			any = true
			if !f.turn {
				f.deficit += q.quantum * q.weight(f.tenant)
				f.turn = true
			}
			if head := f.items[0]; head.cost <= f.deficit {
				f.deficit -= head.cost
				f.items = f.items[1:]
				c.n--
				if len(f.items) == 0 {
					c.ring.Remove(f.elem)
					f.elem, f.deficit, f.turn = nil, 0, false
				}
				return head
			}
			f.turn = false
			c.ring.MoveToBack(f.elem)
		}
		if !any {
			return nil
		}
		// No flow could pay for its head this round. Rather than loop
		// round after round (a 100k-token prompt against a 1k quantum),
		// grant the rounds the nearest flow needs, minus this one, to
		// every eligible flow at once: the same order DRR would reach.
		rounds := math.Inf(1)
		for e := c.ring.Front(); e != nil; e = e.Next() {
			f := e.Value.(*flow)
			if eligible != nil && !eligible(f.tenant) {
				continue
			}
			need := (f.items[0].cost - f.deficit) / (q.quantum * q.weight(f.tenant))
			rounds = min(rounds, math.Ceil(need))
		}
		if rounds > 1 {
			for e := c.ring.Front(); e != nil; e = e.Next() {
				f := e.Value.(*flow)
				if eligible == nil || eligible(f.tenant) {
					f.deficit += (rounds - 1) * q.quantum * q.weight(f.tenant)
				}
			}
		}
	}
}

// evict removes and returns the most recently queued waiter of the lowest
// priority below p that has any, from its longest flow; nil if there is
// none. A full queue makes room this way for a request that outranks.
func (q *fairQueue) evict(p Priority) *waiter {
	for lp := Priority(0); lp < p; lp++ {
		c := &q.classes[lp]
		if c.n == 0 {
			continue
		}
		var longest *flow
		for e := c.ring.Front(); e != nil; e = e.Next() {
			if f := e.Value.(*flow); longest == nil || len(f.items) > len(longest.items) {
				longest = f
			}
		}
		w := longest.items[len(longest.items)-1]
		q.remove(w)
		return w
	}
	return nil
}
