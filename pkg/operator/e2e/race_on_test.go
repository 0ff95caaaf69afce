//go:build race

package e2e_test

// raceEnabled builds the operator under test with -race too, so a data race
// in the process fails the test that started it.
const raceEnabled = true
