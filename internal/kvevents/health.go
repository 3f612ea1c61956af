package kvevents

import (
	"fmt"
	"time"
)

// State is a worker's KV event health.
type State uint8

const (
	// StateUnknown: the consumer has never heard of the worker.
	StateUnknown State = iota
	// StateHealthy: the index holds exactly what the worker reported.
	StateHealthy
	// StateResyncing: the index may be stale for this worker; a snapshot is
	// on its way (or the worker has not sent anything yet).
	StateResyncing
	// StateSilent: no batch or heartbeat for SilenceAfter.
	StateSilent
	// StateDisabled: the worker's registry entry says it publishes no events.
	StateDisabled
)

// states lists the states a known worker can be in, in gauge order.
var states = [...]State{StateHealthy, StateResyncing, StateSilent, StateDisabled}

func (s State) String() string {
	switch s {
	case StateHealthy:
		return "healthy"
	case StateResyncing:
		return "resyncing"
	case StateSilent:
		return "silent"
	case StateDisabled:
		return "disabled"
	}
	return "unknown"
}

// MarshalText makes a State read as its name in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a State name.
func (s *State) UnmarshalText(b []byte) error {
	for _, c := range append(states[:], StateUnknown) {
		if c.String() == string(b) {
			*s = c
			return nil
		}
	}
	return fmt.Errorf("kvevents: unknown state %q", b)
}

// WorkerHealth is one worker's event health, as /health shows it.
type WorkerHealth struct {
	State State  `json:"state"`
	Cause string `json:"cause,omitempty"` // why the state is not healthy, or the last recovery
	Epoch uint64 `json:"epoch"`
	// LastSeq is the last batch applied to the index.
	LastSeq uint64 `json:"last_seq"`
	// LastEventAge is the time since the last batch or heartbeat arrived
	// (or since the worker was registered, if nothing has).
	LastEventAge time.Duration `json:"last_event_age_ns"`
	Batches      uint64        `json:"batches"`   // applied, heartbeats included
	Blocks       uint64        `json:"blocks"`    // hashes in applied Stored/Removed events
	Gaps         uint64        `json:"gaps"`      // sequence gaps seen
	Resyncs      uint64        `json:"resyncs"`   // snapshots installed
	Malformed    uint64        `json:"malformed"` // undecodable messages on its subject
	Stale        uint64        `json:"stale"`     // ignored: duplicate, old-epoch, or sent while disabled
	// Implausible counts batches ignored for a newer epoch than the
	// registry entry's (or, before the entry is known, one from the
	// future): no restart, a forgery or a broken publisher.
	Implausible uint64 `json:"implausible_epoch"`
	// ResyncFailures counts resync attempts that did not end in sync (a
	// failed snapshot request, or a snapshot the buffered batches do not
	// follow); each doubles the wait before the next, up to 30 s.
	ResyncFailures uint64 `json:"resync_failures"`
	// TierBlocks splits Blocks by medium: GPU, CPU, disk.
	TierBlocks [3]uint64 `json:"tier_blocks"`
	// UnknownMedia counts events (and snapshot tiers) whose medium was not
	// one Switchyard knows; their blocks were indexed as the slowest tier.
	UnknownMedia uint64 `json:"unknown_media"`
}
