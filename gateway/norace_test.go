//go:build !race

package gateway

// raceEnabled: the race detector is off.
const raceEnabled = false
