package frontend

import (
	"strconv"
	"time"
)

// stage is a step of the frontend's hop, in the order a request takes them.
type stage uint8

const (
	stageStart    stage = iota // the handler began
	stageRead                  // the body was read
	stageDecode                // the body was decoded and checked
	stageTokenize              // the prompt was validated, rendered, tokenized and hashed
	stageAdmit                 // admission let it in
	stageRoute                 // a worker was picked (and the disaggregation gate asked)
	stageAttempt               // the attempt was set up and the request is about to go
	stageUpstream              // the worker's response headers arrived
	numStages
)

// stageNames are the Server-Timing metric names: each is the time from the
// stage before it.
var stageNames = [numStages]string{"", "read", "decode", "tokenize", "admit", "route", "attempt", "upstream"}

// timing holds when a request reached each stage (zero: not reached, or
// not on this path). The answer carries it as a Server-Timing header, so a
// client or benchmark sees where the hop's time went request by request
// (scripts/bench-proxy.sh prints the medians).
type timing [numStages]time.Time

func (t *timing) mark(s stage) { t[s] = time.Now() }

// header renders the stages reached as "read;dur=0.004, decode;dur=0.007, ...",
// in milliseconds.
func (t *timing) header() string {
	b := make([]byte, 0, 160)
	prev := t[stageStart]
	for s := stageRead; s < numStages; s++ {
		if t[s].IsZero() {
			continue
		}
		if !prev.IsZero() {
			if len(b) > 0 {
				b = append(b, ", "...)
			}
			b = append(b, stageNames[s]...)
			b = append(b, ";dur="...)
			b = strconv.AppendFloat(b, float64(t[s].Sub(prev).Microseconds())/1000, 'f', 3, 64)
		}
		prev = t[s]
	}
	return string(b)
}

// canonServerTiming is the header's canonical key, set without
// canonicalising it per request.
const canonServerTiming = "Server-Timing"
