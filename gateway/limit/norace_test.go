//go:build !race

package limit

// raceEnabled: the race detector is off.
const raceEnabled = false
