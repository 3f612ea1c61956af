package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Settings live in a JetStream key-value entry (Subjects.SettingsBucket,
// key settingsKey) that only frontends can write: a worker's login has no
// JetStream at all. The entry, not the peers' messages, is the truth, so
// a replica that was cut off from the bus while an operator changed them
// elsewhere reads them when it is back, and a joining replica reads them
// at start. They are ordered by the server's sequence of the write (the
// entry's revision), the last writer winning: no version a client stamps,
// so none can be forged large enough to pin them. Peers' messages only
// nudge a replica to read the entry again at once.

const settingsKey = "current"

// settingsPoll is how often a replica reads the entry besides the nudges
// and reconnects: the bound on convergence when a nudge is lost.
const settingsPoll = time.Second

// settingsTimeout bounds one read or write of the entry.
const settingsTimeout = 2 * time.Second

// settingsStore reads and writes the entry. Only Sharer.settingsLoop uses
// it, so it needs no lock.
type settingsStore struct {
	js     jetstream.JetStream
	bucket string
	kv     jetstream.KeyValue
}

func newSettingsStore(nc *nats.Conn, bucket string) (*settingsStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("replica: jetstream: %w", err)
	}
	return &settingsStore{js: js, bucket: bucket}, nil
}

// open opens the bucket, creating it when it is missing (a NATS restart
// loses a memory-storage bucket; any frontend may recreate it).
func (st *settingsStore) open(ctx context.Context) (jetstream.KeyValue, error) {
	if st.kv != nil {
		return st.kv, nil
	}
	kv, err := st.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: st.bucket, Description: "switchyard frontend settings changed through /admin",
		History: 1, Storage: jetstream.MemoryStorage,
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = st.js.KeyValue(ctx, st.bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("replica: settings bucket %s: %w", st.bucket, err)
	}
	st.kv = kv
	return kv, nil
}

// gone reports whether err says the bucket is missing.
func gone(err error) bool {
	return errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// get reads the entry; found is false when there is none.
func (st *settingsStore) get(ctx context.Context) (s Settings, found bool, err error) {
	kv, err := st.open(ctx)
	if err != nil {
		return s, false, err
	}
	e, err := kv.Get(ctx, settingsKey)
	if gone(err) {
		st.kv = nil
		kv, err = st.open(ctx)
		if err == nil {
			e, err = kv.Get(ctx, settingsKey)
		}
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("replica: read settings: %w", err)
	}
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return s, false, fmt.Errorf("replica: settings entry does not decode: %w", err)
	}
	s.Rev = e.Revision()
	return s, true, nil
}

// put writes s and returns the revision the server gave it.
func (st *settingsStore) put(ctx context.Context, s Settings) (uint64, error) {
	s.Rev = 0
	data, err := json.Marshal(s)
	if err != nil {
		return 0, fmt.Errorf("replica: encode settings: %w", err)
	}
	kv, err := st.open(ctx)
	if err != nil {
		return 0, err
	}
	rev, err := kv.Put(ctx, settingsKey, data)
	if gone(err) {
		st.kv = nil
		if kv, err = st.open(ctx); err == nil {
			rev, err = kv.Put(ctx, settingsKey, data)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("replica: write settings: %w", err)
	}
	return rev, nil
}

// settingsLoop keeps this replica's settings equal to the entry: it writes
// a local change, and reads the entry at start, on every reconnect, when
// a peer says it changed it, and every settingsPoll. It returns when ctx
// ends.
func (s *Sharer) settingsLoop(ctx context.Context) {
	st, err := newSettingsStore(s.cfg.NC, s.cfg.Subjects.SettingsBucket())
	if err != nil {
		s.log.Error("settings are not shared", "err", err)
		return
	}
	up := s.cfg.NC.StatusChanged(nats.CONNECTED)
	defer s.cfg.NC.RemoveStatusListener(up)
	t := time.NewTicker(settingsPoll)
	defer t.Stop()
	var lastErr time.Time
	for {
		if err := s.syncSettings(ctx, st); err != nil && ctx.Err() == nil && time.Since(lastErr) > 30*time.Second {
			lastErr = time.Now()
			s.log.Warn("replica: shared settings unreachable; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-up:
		case <-s.settingsKick:
		case <-t.C:
		}
	}
}

// syncSettings writes a pending local change, then adopts the entry.
func (s *Sharer) syncSettings(ctx context.Context, st *settingsStore) error {
	ctx, cancel := context.WithTimeout(ctx, settingsTimeout)
	defer cancel()
	s.mu.Lock()
	local, pending := s.settings, s.pendPut
	s.mu.Unlock()
	if pending {
		rev, err := st.put(ctx, local)
		if err != nil {
			return err
		}
		s.mu.Lock()
		if s.settings.Version == local.Version && s.settings.By == local.By {
			s.pendPut = false
			s.settings.Rev = rev
		}
		s.pendSettings = true // tell the peers to read it
		s.mu.Unlock()
		s.poke()
	}
	cur, found, err := st.get(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if !found {
		// Lost with the bus (a NATS restart): what this replica applied
		// is what every replica last agreed on; put it back.
		s.pendPut = s.settings.Version > 0
		again := s.pendPut
		s.mu.Unlock()
		if again {
			s.kickSettings()
		}
		return nil
	}
	if s.pendPut || cur == s.settings {
		s.mu.Unlock()
		return nil
	}
	changed := cur.Policy != s.settings.Policy || cur.Disagg != s.settings.Disagg
	s.settings = cur
	s.mu.Unlock()
	if changed {
		s.cfg.Apply.Settings(cur)
	}
	return nil
}

func (s *Sharer) kickSettings() {
	select {
	case s.settingsKick <- struct{}{}:
	default:
	}
}
