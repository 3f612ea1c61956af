// Package replica shares routing state between frontend replicas over NATS,
// so that any number of frontends serving one deployment route as one would.
//
// Every replica already consumes the workers' KV events and load reports.
// What it cannot see is what the other replicas decided: the requests they
// have in flight on each worker (with their prompt and decode blocks, from
// the frontend's Started; a request's own router counts it from its pick,
// and a disaggregated request is in flight on two workers under one ID), the
// approximate-index records of their routing decisions, the links they
// probed, and the router and disaggregation settings an operator changed
// through one replica's /admin. A Sharer publishes this replica's share and
// applies every peer's share to this replica's router, gate and server
// through the Applier it is given.
//
// Cost and bounds:
//   - In-flight changes are batched: the first change after a quiet spell
//     is published at once (a finish must reach the peers before the
//     client's next request does), later ones coalesce for MinGap.
//   - Approximate-index records are coalesced by block hash: a hash already
//     shared for the same worker within ApproxRefresh is not sent again,
//     and at most MaxPendingApprox hashes wait for one flush; beyond that
//     they are dropped and counted.
//   - Every FullEvery each replica publishes its whole in-flight set, which
//     peers reconcile against (a lost message heals within one period) and
//     which doubles as its heartbeat. A peer silent for PeerTTL is expired:
//     its requests come off the router's load at once.
//   - A replica that starts announces itself; every peer answers with its
//     whole share (in-flight set, recent approximate records, measured
//     links), so it converges in one round trip.
//
// Ordering: one goroutine (Run) publishes, so a peer sees this replica's
// messages in order; peers' messages are applied on the subscription's
// goroutine. Settings live in a key-value entry only frontends can write;
// the write the server sequenced last wins, and a replica reads the entry
// at start, on every reconnect, when a peer says it changed it, and every
// second (see settings.go). Settings from start-up flags are not shared:
// only /admin changes are.
//
// Trust: a peer's share moves this replica's routing, so only the bus's
// frontend user may publish on the subject; a worker's login cannot (see
// bus.WorkerPermissions). Malformed messages are counted and dropped; a
// message carrying this replica's own ID from another run is reported as a
// duplicate ID.
//
// It does not share the prefix index (every replica builds it from the KV
// events), nor does it elect anything but the replica that probes new links
// (the one with the smallest ID), so that two replicas never probe one link
// at once and each measure half of it.
package replica
