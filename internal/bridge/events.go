package bridge

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
)

// slogStd adapts the bridge's logger for zmq4, which logs reconnects.
func slogStd(l *slog.Logger) *log.Logger { return slog.NewLogLogger(l.Handler(), slog.LevelDebug) }

// receive reads the SUB socket and hands frames to process, until ctx ends.
func (b *Bridge) receive(ctx context.Context) error {
	for {
		msg, err := b.sub.Recv()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			// zmq4 reports a dropped connection here; it redials by itself.
			b.log.Debug("kv events receive", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		select {
		case b.live <- msg.Frames:
		case <-ctx.Done():
			return nil
		}
	}
}

// engineBatch is one engine message waiting to be applied.
type engineBatch struct {
	seq     uint64
	payload []byte
}

// seqState is the processing goroutine's view of the engine's stream.
type seqState struct {
	synced bool
	next   uint64 // the engine sequence number expected next
	// fresh: nothing of the engine's current run has been seen, so the
	// number of its first batch is unknown (vLLM's is 0, others' may be
	// any); see firstContact.
	fresh bool
	// dupBelow: right after a replay, live messages below it are copies
	// of replayed ones, not a restart.
	dupBelow uint64
	// startSeen is the engine start time the last restart handled was
	// checked against.
	startSeen float64
}

// process applies engine batches in sequence order until ctx ends. It first
// asks replay for the engine's whole history, so a bridge started beside a
// running engine knows what it holds; without replay it cannot know and
// starts rebuilding.
func (b *Bridge) process(ctx context.Context) error {
	var s seqState
	if b.cfg.KVReplay != "" {
		got, err := b.replay(ctx, 0)
		switch {
		case err != nil:
			b.rebuild(&s, fmt.Sprintf("start-up replay failed: %v", err))
		case len(got) == 0:
			// The engine has published nothing: it holds nothing. Its
			// first batch may carry any number.
			s.synced, s.fresh = true, true
		case got[0].seq != 0 && !b.firstContact(got, nil):
			b.rebuild(&s, fmt.Sprintf("start-up replay begins at seq %d and fills the engine's buffer of %d batches: the engine's earlier blocks are unknown", got[0].seq, b.cfg.ReplayBufferSteps))
			s.next = got[0].seq // one rebuild for the one loss
			if err := b.applyRun(&s, got); err != nil {
				return err
			}
		default:
			b.firstSeen(got[0].seq, "start-up replay")
			s.synced, s.next = true, got[0].seq
			if err := b.applyRun(&s, got); err != nil {
				return err
			}
		}
		// The SUB was connected before the replay: live copies of the
		// replayed batches may follow, and are not a restart.
		s.dupBelow = s.next
	} else {
		b.rebuild(&s, "started without --kv-replay: blocks the engine cached before are unknown")
		s.synced, s.next = false, 0
	}
	idle := time.NewTicker(b.cfg.TailPoll)
	defer idle.Stop()
	lastLive := time.Now()
	for {
		var frames [][]byte
		select {
		case <-ctx.Done():
			return nil
		case <-b.restarts:
			// Authoritative even when the sequence already showed the
			// restart: a new run's batch can carry the very number the old
			// run expected next and pass for a continuation.
			b.mu.Lock()
			started := b.started
			b.mu.Unlock()
			if started == s.startSeen {
				continue
			}
			b.restarted(&s, "the engine's process_start_time_seconds changed")
			s.startSeen = started
			if b.cfg.KVReplay != "" {
				if err := b.tailPoll(ctx, &s); err != nil {
					return err
				}
			}
			continue
		case now := <-idle.C:
			// Engines send no heartbeats, so a lost last batch shows only
			// when the next one comes. While idle, ask replay whether
			// anything was published after what we applied.
			if b.cfg.KVReplay != "" && s.synced && now.Sub(lastLive) >= b.cfg.TailPoll {
				if err := b.tailPoll(ctx, &s); err != nil {
					return err
				}
			}
			continue
		case frames = <-b.live:
			lastLive = time.Now()
		}
		_, seq, payload, err := enginewire.ParseLive(frames)
		if err != nil {
			b.mu.Lock()
			b.st.Malformed++
			b.mu.Unlock()
			b.malLog.log(b.log, "malformed engine message dropped", "err", err)
			continue
		}
		if err := b.onLive(ctx, &s, engineBatch{seq, payload}); err != nil {
			return err
		}
	}
}

func (b *Bridge) onLive(ctx context.Context, s *seqState, eb engineBatch) error {
	switch {
	case s.synced && s.fresh && eb.seq != s.next:
		return b.firstLive(ctx, s, eb)
	case s.synced && eb.seq == s.next:
		s.dupBelow = 0
		return b.apply(s, eb)
	case s.synced && eb.seq < s.dupBelow:
		return nil // already applied from the replay
	case s.synced && eb.seq > s.next:
		b.mu.Lock()
		b.st.Gaps++
		b.mu.Unlock()
		return b.recover(ctx, s, eb, fmt.Sprintf("sequence gap: expected %d, got %d", s.next, eb.seq))
	case s.synced:
		// Lower than expected: a new run of the engine, whose cache
		// started empty. Clear in band, then take its history.
		b.restarted(s, fmt.Sprintf("sequence went back: expected %d, got %d", s.next, eb.seq))
		if eb.seq == 0 {
			s.dupBelow = 0
			return b.apply(s, eb)
		}
		return b.firstLive(ctx, s, eb)
	default:
		// Not synced (started without replay): take the stream from
		// here; the rebuild hold covers what came before.
		s.synced = true
		s.next = eb.seq
		return b.apply(s, eb)
	}
}

// firstContact says whether a replay reply got, asked for from seq 0
// while nothing of the engine's run has been applied, holds the run's whole
// history, so that its first batch is the run's first and not a sign of
// loss. That is so when the reply starts exactly at live, the first live
// batch after a start-up replay that returned nothing (live nil: not
// applicable), or when the buffer is not full (fewer batches than the
// engine's buffer_steps, Config.ReplayBufferSteps), since an engine evicts
// from its buffer only once it is full.
func (b *Bridge) firstContact(got []engineBatch, live *engineBatch) bool {
	switch {
	case len(got) == 0:
		return false
	case live != nil && got[0].seq == live.seq:
		return true
	case live != nil && got[0].seq > live.seq:
		return false // the buffer no longer holds the live batch: it moved on
	}
	return len(got) < b.cfg.ReplayBufferSteps
}

// firstSeen records the number of the engine run's first batch.
func (b *Bridge) firstSeen(seq uint64, from string) {
	b.mu.Lock()
	b.st.FirstSeq = seq
	b.mu.Unlock()
	if seq != 0 {
		b.log.Info("engine numbers its batches from a number other than 0: first contact, not loss", "first_seq", seq, "seen_in", from)
	}
}

// firstLive handles the first live batch of an engine run that has
// published nothing the bridge saw, when it is not numbered 0: replay
// tells whether it is the run's first (see firstContact) or whether
// batches before it were lost.
func (b *Bridge) firstLive(ctx context.Context, s *seqState, eb engineBatch) error {
	if b.cfg.KVReplay == "" {
		return b.recover(ctx, s, eb, fmt.Sprintf("first batch seen is seq %d", eb.seq))
	}
	got, err := b.replay(ctx, 0)
	if err != nil || !b.firstContact(got, &eb) {
		// Fall back on the general path, which asks again and rebuilds.
		return b.recover(ctx, s, eb, fmt.Sprintf("first batch seen is seq %d and replay does not show it as the engine's first", eb.seq))
	}
	b.firstSeen(got[0].seq, "replay of the first live batch")
	s.next = got[0].seq
	if err := b.applyRun(s, got); err != nil {
		return err
	}
	s.dupBelow = s.next
	if eb.seq >= s.next {
		// Published after the replay's snapshot of the buffer.
		return b.onLive(ctx, s, eb)
	}
	return nil
}

// restarted handles a new run of the engine, whose cache started empty:
// clear in band and take its first batch, whatever its number, as its
// first (see firstContact).
func (b *Bridge) restarted(s *seqState, cause string) {
	b.mu.Lock()
	b.st.Restarts++
	b.mu.Unlock()
	b.log.Warn("engine restarted", "cause", cause)
	b.publish([]kvevents.Event{{Kind: kvevents.Cleared}}, func() { b.mirror.Reset() })
	s.synced, s.next, s.dupBelow, s.fresh = true, 0, 0, true
}

// tailPoll asks replay for batches after the last one applied and applies
// them; a reply that does not start where expected means loss.
func (b *Bridge) tailPoll(ctx context.Context, s *seqState) error {
	got, err := b.replay(ctx, s.next)
	if err != nil || len(got) == 0 {
		return nil // nothing new, or the engine is away: the next batch will tell
	}
	if s.fresh && b.firstContact(got, nil) {
		// The run's first batches, which the SUB missed (it joined
		// late), or which an engine numbering from another number sent.
		b.firstSeen(got[0].seq, "replay while idle")
		s.next = got[0].seq
		if err := b.applyRun(s, got); err != nil {
			return err
		}
		s.dupBelow = s.next
		return nil
	}
	b.mu.Lock()
	b.st.Gaps++
	b.mu.Unlock()
	if got[0].seq != s.next {
		b.mu.Lock()
		b.st.ReplaysShort++
		b.mu.Unlock()
		b.rebuild(s, fmt.Sprintf("batches after %d were lost and the engine's buffer starts at %d", s.next, got[0].seq))
		s.next = got[0].seq
	} else {
		b.mu.Lock()
		b.st.ReplaysCovered++
		b.mu.Unlock()
		b.log.Info("lost engine batches recovered from replay while idle", "from", s.next, "batches", len(got))
	}
	if err := b.applyRun(s, got); err != nil {
		return err
	}
	s.dupBelow = s.next
	return nil
}

// recover fetches the batches from s.next on from the engine's replay
// socket and applies them; when replay cannot cover the gap it rebuilds.
// eb is the live batch that revealed the gap.
func (b *Bridge) recover(ctx context.Context, s *seqState, eb engineBatch, cause string) error {
	if b.cfg.KVReplay == "" {
		b.rebuild(s, cause+"; no --kv-replay to recover from")
		s.next = eb.seq
		return b.apply(s, eb)
	}
	got, err := b.replay(ctx, s.next)
	switch {
	case err != nil:
		b.mu.Lock()
		b.st.ReplaysFailed++
		b.mu.Unlock()
		b.rebuild(s, fmt.Sprintf("%s; replay failed: %v", cause, err))
	case len(got) == 0 || got[0].seq != s.next:
		b.mu.Lock()
		b.st.ReplaysShort++
		b.mu.Unlock()
		first := "nothing"
		if len(got) > 0 {
			first = fmt.Sprintf("seq %d", got[0].seq)
		}
		b.rebuild(s, fmt.Sprintf("%s; replay from %d starts at %s (the engine's buffer no longer holds it)", cause, s.next, first))
		if len(got) > 0 {
			s.next = got[0].seq
		}
		if err := b.applyRun(s, got); err != nil {
			return err
		}
	default:
		b.mu.Lock()
		b.st.ReplaysCovered++
		b.mu.Unlock()
		b.log.Info("engine gap recovered from replay", "cause", cause, "batches", len(got))
		if err := b.applyRun(s, got); err != nil {
			return err
		}
		s.dupBelow = s.next
	}
	if eb.payload != nil && eb.seq >= s.next {
		if eb.seq > s.next {
			b.rebuild(s, fmt.Sprintf("replay ended at %d before live seq %d", s.next, eb.seq))
		}
		return b.apply(s, eb)
	}
	return nil
}

// applyRun applies replayed batches in order, rebuilding across any hole.
func (b *Bridge) applyRun(s *seqState, run []engineBatch) error {
	for _, eb := range run {
		if eb.seq < s.next {
			continue
		}
		if eb.seq > s.next {
			b.rebuild(s, fmt.Sprintf("replay skips from %d to %d", s.next, eb.seq))
		}
		if err := b.apply(s, eb); err != nil {
			return err
		}
	}
	return nil
}

// apply decodes and applies one batch, the next in sequence. An undecodable
// payload loses that batch's events for good: the mirror is rebuilt.
func (b *Bridge) apply(s *seqState, eb engineBatch) error {
	if s.fresh && eb.seq == 0 {
		b.firstSeen(0, "live")
	}
	s.synced, s.fresh = true, false
	s.next = eb.seq + 1
	var batch enginewire.Batch
	if err := enginewire.DecodeBatch(eb.payload, &batch); err != nil {
		b.mu.Lock()
		b.st.Malformed++
		b.mu.Unlock()
		b.malLog.log(b.log, "malformed engine batch: its events are lost", "seq", eb.seq, "err", err)
		b.rebuild(s, fmt.Sprintf("batch %d did not decode: %v", eb.seq, err))
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out, err := b.mirror.Apply(&batch)
	if err != nil {
		if errors.Is(err, ErrBlockSize) {
			return err // the bridge stops: its hashes could never match
		}
		return nil
	}
	b.st.Batches++
	b.st.LastSeq = eb.seq
	b.st.Synced = true
	b.pub.PublishStep(out)
	return nil
}

// publish sends events after running f, both under the lock.
func (b *Bridge) publish(events []kvevents.Event, f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if f != nil {
		f()
	}
	b.pub.PublishStep(events)
}

// rebuild clears the mirror and the frontend's entries for this worker and
// keeps the frontend resyncing (on its approximate index) for RebuildHold.
func (b *Bridge) rebuild(s *seqState, cause string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mirror.Reset()
	b.pub.PublishStep([]kvevents.Event{{Kind: kvevents.Cleared}})
	b.pub.Resync()
	b.st.Rebuilds++
	b.st.RebuildUntil = time.Now().Add(b.cfg.RebuildHold)
	b.st.RebuildCause = cause
	b.log.Warn("engine KV events lost: index for this worker cleared; the frontend routes it approximately meanwhile",
		"cause", cause, "hold", b.cfg.RebuildHold)
}

// replay asks the engine's replay socket for every buffered batch from seq
// start on, and returns them in order.
func (b *Bridge) replay(ctx context.Context, start uint64) ([]engineBatch, error) {
	rctx, cancel := context.WithTimeout(ctx, b.cfg.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(rctx, zmq4.WithDialerMaxRetries(3), zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithLogger(slogStd(b.log)))
	defer d.Close()
	if err := d.Dial(b.cfg.KVReplay); err != nil {
		return nil, fmt.Errorf("dial %s: %w", b.cfg.KVReplay, err)
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, enginewire.AppendSeq(nil, start))); err != nil {
		return nil, fmt.Errorf("send replay request: %w", err)
	}
	type result struct {
		msg zmq4.Msg
		err error
	}
	ch := make(chan result, 1)
	var out []engineBatch
	for {
		go func() {
			m, err := d.Recv()
			ch <- result{m, err}
		}()
		var r result
		select {
		case <-rctx.Done():
			d.Close()
			<-ch
			return nil, fmt.Errorf("no end marker within %v (%d batches received)", b.cfg.ReplayTimeout, len(out))
		case r = <-ch:
		}
		if r.err != nil {
			return nil, fmt.Errorf("receive: %w", r.err)
		}
		seq, payload, end, err := enginewire.ParseReplay(r.msg.Frames)
		if err != nil {
			b.mu.Lock()
			b.st.Malformed++
			b.mu.Unlock()
			return nil, err
		}
		if end {
			return out, nil
		}
		out = append(out, engineBatch{seq, payload})
	}
}
