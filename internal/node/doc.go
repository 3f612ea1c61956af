// Package node assembles Switchyard's processes from its libraries: a
// worker node (simulated engine, KV events, registration, load reports, KV
// transfer) and a frontend node (registry watch, event consumer, prefix
// index, router, disaggregation gate, link probes, HTTP API). The
// `worker`, `frontend` and `up` commands are thin layers over it, and so are
// in-process integration tests: what they exercise is what users run.
//
// Every Start function returns a value whose Close stops what it started and
// waits for it.
package node
