//go:build race

package state

// raceEnabled reports whether the race detector is on: it adds
// allocations of its own, so allocation counts are asserted without it.
const raceEnabled = true
