//go:build race

package operatortest

// RaceEnabled: the tests run with -race, so the operator under test is built
// with it too and a data race in the process fails the test that started it.
const RaceEnabled = true
