// Package admit decides, under overload, which requests run, which wait and
// which are told to come back: admission control with a bounded fair queue,
// per-tenant rate limits and the tenants file that names who is asking.
//
// A Controller hands out tickets while its Capacity (the frontend's free
// worker slots) lasts. When every slot is taken a request queues; the next
// freed slot goes to the highest priority waiting (critical, standard,
// sheddable) and, within a priority, to tenants by deficit round robin on
// the requests' estimated cost in tokens, each tenant's quantum scaled by
// its weight, so a tenant sending five times more gets no more than its
// share. A request is admitted the moment a ticket is released.
//
// Answers: a sheddable request that would wait is refused at once; a
// request that waits QueueTimeout is refused; a full queue (MaxQueue)
// refuses a newcomer unless it outranks a queued request, which it then
// displaces; a tenant over requests_per_minute or tokens_per_minute is
// refused before it queues. Each refusal is a *Rejection naming the limit
// and a Retry-After worked out from the measured drain rate (releases per
// second over the last 10 s). Only when Capacity is 0 (no worker can serve)
// is the answer "unavailable" (a 503) rather than "too many" (a 429).
//
// Queued requests are not load: they hold no ticket and reach no router
// until admitted. The controller knows nothing of workers; the frontend
// routes each admitted request to a worker with a free slot.
//
// Queues and rate limits are per Controller, so per frontend replica;
// the frontend's Capacity counts the slots its peers hold, so replicas do
// not each admit a full share.
//
// A Controller is safe for concurrent use and starts no goroutines: each
// waiting request's own goroutine waits on its timer and a recheck tick.
package admit
