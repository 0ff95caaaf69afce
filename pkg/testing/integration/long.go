package integration

import "os"

// LongEnv is the environment variable that selects the suites' long
// variants: `make chaos` runs with CHAOS=long. Without it a suite runs at
// its CI scale, which checks the same properties in seconds rather than
// minutes (.ci/run's budget); with it, soaks last their full time and
// fleets and storms have their full size.
const LongEnv = "CHAOS"

// Long reports whether this is a long run (`make chaos`).
func Long() bool { return os.Getenv(LongEnv) == "long" }

// Scaled is ci in a CI run and long in a long run (`make chaos`): a
// fleet's size, a soak's window, a storm's rounds.
func Scaled[T any](ci, long T) T {
	if Long() {
		return long
	}
	return ci
}
