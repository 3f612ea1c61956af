// Package linkemu emulates a network link inside one process: a token-bucket
// Shaper that paces bytes to a fixed Rate, and a net.Conn wrapper that paces
// its writes through a Shaper. It lets a single machine reproduce what a
// prefill→decode transfer costs on a 1 GbE or 10 GbE link.
//
// It is an emulation, not a measurement: it adds no latency, loss or jitter,
// and it cannot make a link faster than the real one underneath. Rate.String
// says "(emulated)" so the label travels with every figure shaped by it.
//
// Units accepted by ParseRate (decimal SI prefixes, as network line rates are
// quoted): "bit" forms are bits per second — "100mbit", "1gbit", "10gbps",
// where 1 gbit = 1e9 bits/s = 125,000,000 bytes/s; "B" forms are bytes per
// second — "125MB/s", "1.25GB/s", with binary "KiB/MiB/GiB" also accepted.
// A bare lower-case "b" ("100mb") is refused as ambiguous.
//
// A Shaper is safe for concurrent use; concurrent callers share its rate, as
// flows share one physical link.
package linkemu
