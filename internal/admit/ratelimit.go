package admit

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// bucket is a token bucket holding up to perMinute units, refilled at
// perMinute/60 a second: a tenant may burst its whole minute's allowance,
// then is held to the rate. Not safe for concurrent use (Controller.mu).
type bucket struct {
	perMinute float64
	level     float64
	last      time.Time
}

func newBucket(perMinute int, now time.Time) *bucket {
	return &bucket{perMinute: float64(perMinute), level: float64(perMinute), last: now}
}

func (b *bucket) refill(now time.Time) {
	if el := now.Sub(b.last); el > 0 {
		b.level = min(b.perMinute, b.level+el.Seconds()*b.perMinute/60)
		b.last = now
	}
}

// wait is how long until n units are in the bucket.
func (b *bucket) wait(n float64) time.Duration {
	if b.level >= n {
		return 0
	}
	return time.Duration((n - b.level) / (b.perMinute / 60) * float64(time.Second))
}

// status is the bucket as the x-ratelimit-* headers report it.
func (b *bucket) status() Limit {
	return Limit{Set: true, Limit: int(b.perMinute), Remaining: int(math.Floor(b.level)),
		Reset: time.Duration((b.perMinute - b.level) / (b.perMinute / 60) * float64(time.Second))}
}

// Limit is one rate limit's state after a request: the x-ratelimit-*
// headers OpenAI sends.
type Limit struct {
	Set       bool // the tenant has this limit
	Limit     int  // per minute
	Remaining int
	Reset     time.Duration // until the bucket is full again
}

// RateLimits are a tenant's request and token limits after a request.
type RateLimits struct {
	Requests, Tokens Limit
}

// SetHeaders writes OpenAI's x-ratelimit-limit-requests,
// x-ratelimit-remaining-requests, x-ratelimit-reset-requests and the three
// -tokens headers for the limits that are set.
func (rl RateLimits) SetHeaders(h http.Header) {
	for _, l := range []struct {
		suffix string
		l      Limit
	}{{"requests", rl.Requests}, {"tokens", rl.Tokens}} {
		if !l.l.Set {
			continue
		}
		h.Set("x-ratelimit-limit-"+l.suffix, strconv.Itoa(l.l.Limit))
		h.Set("x-ratelimit-remaining-"+l.suffix, strconv.Itoa(l.l.Remaining))
		h.Set("x-ratelimit-reset-"+l.suffix, formatReset(l.l.Reset))
	}
}

// formatReset writes a duration as OpenAI does: "1s", "6m0s", "20ms".
func formatReset(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if d < time.Second {
		return strconv.FormatInt(max(1, d.Milliseconds()), 10) + "ms"
	}
	return d.Round(time.Millisecond).String()
}
