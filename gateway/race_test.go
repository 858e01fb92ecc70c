//go:build race

package gateway

// raceEnabled: the race detector is on, so allocation counts are its own.
const raceEnabled = true
