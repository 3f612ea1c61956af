//go:build race

package kvxfer

// raceEnabled: the race detector slows kvpayload and CRC work ~50×, so
// throughput assertions cannot hold under it.
const raceEnabled = true
