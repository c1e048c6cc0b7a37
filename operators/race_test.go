//go:build race

package operators

// raceEnabled reports whether the race detector is on: it makes Pebble
// about 15 times slower, so the largest tests scale down under it.
const raceEnabled = true
