package replica

// message is what replicas publish on Subjects.Replicas(), as JSON: the
// rate is bounded by batching and the format is readable with `nats sub`.
// Every field but the header is optional; a message carries whatever was
// pending when it was flushed.
type message struct {
	Replica string `json:"replica"`
	Epoch   int64  `json:"epoch"` // the replica's start, unix ns: a restart is a new epoch
	Seq     uint64 `json:"seq"`
	// Hello announces a replica that just started: peers answer with
	// their whole share.
	Hello bool `json:"hello,omitempty"`
	// Full marks Started as one part of the replica's whole in-flight set:
	// after the last part, peers finish its requests the set lacks.
	Full     *fullPart   `json:"full,omitempty"`
	Started  []reqMsg    `json:"started,omitempty"`
	First    []idMsg     `json:"first,omitempty"`
	Finished []idMsg     `json:"finished,omitempty"`
	Approx   []approxMsg `json:"approx,omitempty"`
	Links    []Link      `json:"links,omitempty"`
	// Responses are stored responses' ids and the workers holding them,
	// for previous_response_id.
	Responses []idMsg   `json:"responses,omitempty"`
	Settings  *Settings `json:"settings,omitempty"`
}

type fullPart struct {
	ID    uint64 `json:"id"`
	Part  int    `json:"part"`
	Parts int    `json:"parts"`
}

// reqMsg is one request in flight: the prompt blocks the worker must
// compute (p) and all it holds while decoding (h).
type reqMsg struct {
	ID       string `json:"id"`
	Worker   string `json:"w"`
	Prefill  int    `json:"p"`
	Prompt   int    `json:"h"`
	Decoding bool   `json:"d,omitempty"`
}

type idMsg struct {
	ID     string `json:"id"`
	Worker string `json:"w"`
}

// approxMsg is routing decisions to one worker at one time: block hashes
// packed as little-endian uint64s (base64 in JSON).
type approxMsg struct {
	Worker string `json:"w"`
	At     int64  `json:"at"`
	Hashes []byte `json:"h"`
}
