package kvevents

// Kind says what happened to the blocks of an Event.
type Kind uint8

const (
	// Stored: the blocks are now held by the worker and can be reused.
	Stored Kind = 1
	// Removed: the blocks were evicted.
	Removed Kind = 2
	// Cleared: the worker dropped every block it held.
	Cleared Kind = 3
)

func (k Kind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	}
	return "unknown"
}

// Event is one change to a worker's cache. For Stored, Parent is the hash of
// the block before Hashes[0] (kvindex.Root(salt) for a prompt's first block)
// and Hashes are consecutive blocks of one chain. Removed lists evicted
// hashes in any order. Cleared has no hashes and drops every tier.
//
// Medium is the tier the blocks were stored in or removed from, as in
// vLLM's events: a GPU eviction that offloads the block to host memory is a
// GPU Removed followed by a CPU Stored, and a block loaded back is a GPU
// Stored while its CPU copy stays.
type Event struct {
	Kind   Kind
	Medium Tier
	Parent uint64
	Hashes []uint64
}

// Batch is what a worker publishes: the events of one scheduler step, or an
// empty heartbeat. Seq counts batches (heartbeats included) from 1 within an
// Epoch, with no gaps; a new Epoch starts at every worker start.
type Batch struct {
	WorkerID  string
	Epoch     uint64
	Seq       uint64
	UnixNano  int64 // the worker's wall clock when the batch was sealed
	Heartbeat bool  // true for an idle heartbeat; Events is then empty
	Events    []Event
	// UnknownMedia counts events whose medium the decoder did not know;
	// their Medium is TierDisk. Not encoded.
	UnknownMedia int
}
