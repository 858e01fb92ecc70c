//go:build race

package limit

// raceEnabled: the race detector is on (TestSimulation runs fewer seeds).
const raceEnabled = true
