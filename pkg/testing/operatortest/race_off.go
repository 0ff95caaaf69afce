//go:build !race

package operatortest

// RaceEnabled: the tests run without -race.
const RaceEnabled = false
