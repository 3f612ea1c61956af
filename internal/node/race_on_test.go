//go:build race

package node

// raceEnabled: the race detector slows payload generation so much that
// throughput assertions measure the CPU, not the emulated link.
const raceEnabled = true
