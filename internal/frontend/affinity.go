package frontend

import "sync"

// maxAffinity bounds the response ids the frontend remembers. An entry is
// two short strings (~100 bytes with the map's overhead), so 1<<18 of them
// hold about 25 MiB; an engine keeps stored responses for far fewer.
const maxAffinity = 1 << 18

// affinity maps a stored response's id to the worker that stored it, for
// previous_response_id: that worker alone holds the conversation. It
// forgets the oldest entries beyond its capacity. Safe for concurrent use.
type affinity struct {
	mu    sync.Mutex // guards all below
	cap   int
	ids   map[string]string
	order []string // ring of ids in insertion order
	next  int
}

func newAffinity(capacity int) *affinity {
	return &affinity{cap: capacity, ids: make(map[string]string)}
}

// put records that worker stored response id.
func (a *affinity) put(id, worker string) {
	if id == "" || worker == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.ids[id]; ok {
		a.ids[id] = worker
		return
	}
	if len(a.order) < a.cap {
		a.order = append(a.order, id)
	} else {
		delete(a.ids, a.order[a.next])
		a.order[a.next] = id
		a.next = (a.next + 1) % a.cap
	}
	a.ids[id] = worker
}

// get returns the worker that stored response id.
func (a *affinity) get(id string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w, ok := a.ids[id]
	return w, ok
}
