//go:build race

package simulate

// raceEnabled: tests shrink their runs under the race detector, which
// slows the simulation several times over.
const raceEnabled = true
