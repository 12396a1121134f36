//go:build race

package runner_test

// raceEnabled: the race detector is on, and costs the lab several times
// the CPU per call.
const raceEnabled = true
