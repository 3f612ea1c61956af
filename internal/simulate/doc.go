// Package simulate runs a Switchyard cluster in virtual time: a
// discrete-event simulation that replays a trace through the production
// router (internal/router, its kv cost function and load tracking), the
// prefix index (internal/kvindex, fed by kvevents.Apply exactly as the
// event consumer feeds it), the disaggregation gate (internal/gate, asked
// through gate.InputFor as the frontend asks it) and one engine Core per
// worker (internal/engine/sim: the same scheduler, block manager and
// perfmodel timing as a live worker). Nothing is copied: the live and the
// simulated cluster run the same code, and only the driver differs.
//
// What it models and what it does not:
//   - Workers publish a step's KV events when they start it (as the live
//     engine does) and the index applies them at once: no bus delay.
//   - Workers report load every 250 ms of wall-equivalent time, each on its
//     own phase (scattered by the seed, as live workers' tickers are by
//     their start times), showing the queues as they stand mid-step as a
//     live engine's do; the router and the gate read those reports as live.
//     Reports reach the router at once: no bus delay.
//   - A prefill worker's KV goes to the decode worker over a link of a fixed
//     rate (TCP goodput of the line rate, as linkemu shapes it live) plus an
//     RTT; concurrent transfers from one prefill worker share its rate
//     equally. Links are measured before the first request (live: probed
//     when the pair registers) and the gate's estimator then learns from
//     every transfer, as it does live. The decode leg reaches the decode
//     worker when the prefill is done, and its place in that worker's queue
//     dates from then, although it is scheduled only once the KV is in (as
//     the live worker and vLLM queue it, sim.Request.QueuedAt).
//   - Requests reach the router one at a time, in trace order, and each is
//     counted in its worker's load as it is picked. A live frontend handles
//     requests concurrently: on a busy host near-simultaneous ones reach
//     the router out of order, or before an earlier pick's load is counted
//     (the README's validation against live traces both).
//   - Frontend and HTTP overheads are zero; requests never time out; a
//     request the engine refuses (longer than the KV cache or the context)
//     counts as an error, as the live worker's HTTP 400 does.
//
// The run is deterministic: the same Config gives the same report, byte for
// byte, whatever Config.Threads. An aggregated cluster's workers step on
// Threads goroutines: between two arrivals each worker runs its own events
// ahead, logging what they change outside it (index, router load tracking,
// counters), and the driver then applies those changes in the serial run's
// order before it routes the arrival (the index's split by its lock stripes
// across the goroutines, each stripe's in that order; window.go says why
// that is exact). Routing stays on one goroutine. A disaggregated cluster
// runs on one goroutine: its prefill workers, links and decode workers hand
// each other requests between arrivals. Times in the
// report are divided by Speedup so that a simulation of `up --speedup S`
// compares directly with `bench` against it.
package simulate
