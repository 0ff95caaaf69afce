//go:build !race

package operator_test

const raceEnabled = false
