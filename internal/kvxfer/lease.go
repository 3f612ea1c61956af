package kvxfer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"
)

// DefaultLeaseTTL matches vLLM's kv_lease_duration default.
const DefaultLeaseTTL = 30 * time.Second

// lease is one set of pinned blocks awaiting a pull.
type lease struct {
	hashes  []uint64
	release func()
	once    sync.Once
	timer   *time.Timer
}

// free calls the release func at most once.
func (l *lease) free() {
	l.once.Do(func() {
		if l.release != nil {
			l.release()
		}
	})
}

// tombstone remembers why a token is no longer live, so a late pull gets a
// precise refusal rather than "unknown".
type tombstone struct {
	code Code
	at   time.Time
}

// leaseTable holds live leases and recent tombstones.
type leaseTable struct {
	ttl time.Duration
	// keep is how long a tombstone is remembered; older tokens read as
	// unknown, which is still a refusal.
	keep time.Duration

	mu        sync.Mutex // guards everything below
	live      map[string]*lease
	dead      map[string]tombstone
	lastPrune time.Time
	closed    bool
}

var errClosed = errors.New("kvxfer: server closed")

func newLeaseTable(ttl time.Duration) *leaseTable {
	return &leaseTable{
		ttl:       ttl,
		keep:      2 * ttl,
		live:      make(map[string]*lease),
		dead:      make(map[string]tombstone),
		lastPrune: time.Now(),
	}
}

// add pins hashes under a new random 128-bit token. The hashes are copied.
func (t *leaseTable) add(hashes []uint64, release func()) (string, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	token := hex.EncodeToString(raw[:])
	l := &lease{hashes: append([]uint64(nil), hashes...), release: release}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", errClosed
	}
	now := time.Now()
	if now.Sub(t.lastPrune) > t.keep {
		for tok, ts := range t.dead {
			if now.Sub(ts.at) > t.keep {
				delete(t.dead, tok)
			}
		}
		t.lastPrune = now
	}
	t.live[token] = l
	l.timer = time.AfterFunc(t.ttl, func() { t.expire(token) })
	return token, nil
}

func (t *leaseTable) expire(token string) {
	t.mu.Lock()
	l, ok := t.live[token]
	if ok {
		delete(t.live, token)
		t.dead[token] = tombstone{code: CodeLeaseExpired, at: time.Now()}
	}
	t.mu.Unlock()
	if ok {
		l.free()
	}
}

// claim takes the lease for a pull. The caller must call free on the result
// when the pull ends, whatever its outcome. A refusal returns the code.
func (t *leaseTable) claim(token string) (*lease, Code) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, CodeUnavailable
	}
	if l, ok := t.live[token]; ok {
		delete(t.live, token)
		l.timer.Stop()
		t.dead[token] = tombstone{code: CodeLeaseUsed, at: time.Now()}
		return l, 0
	}
	if ts, ok := t.dead[token]; ok {
		return nil, ts.code
	}
	return nil, CodeLeaseUnknown
}

// peek reports how many blocks a live lease holds, without claiming it,
// so a server can refuse a pull before reading its block list. A token
// that is not live returns the refusal code.
func (t *leaseTable) peek(token string) (int, Code) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, CodeUnavailable
	}
	if l, ok := t.live[token]; ok {
		return len(l.hashes), 0
	}
	if ts, ok := t.dead[token]; ok {
		return 0, ts.code
	}
	return 0, CodeLeaseUnknown
}

// close releases every live lease and refuses new ones.
func (t *leaseTable) close() {
	t.mu.Lock()
	t.closed = true
	live := t.live
	t.live = make(map[string]*lease)
	t.mu.Unlock()
	for _, l := range live {
		l.timer.Stop()
		l.free()
	}
}

// count reports the number of live leases.
func (t *leaseTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}
