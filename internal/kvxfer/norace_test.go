//go:build !race

package kvxfer

const raceEnabled = false
