//go:build race

package runtime

// raceEnabled reports whether the race detector is on: it allocates for
// itself, so allocation counts are checked only without it.
const raceEnabled = true
