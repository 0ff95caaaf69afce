// Command timetable is .ci/run's clock: it runs go test with -json and
// prints the usual output, records how long each test package took and how
// much CPU its test binary and the processes it started used, and prints
// the table of .ci/run's steps and packages at the end.
//
//	timetable go-test [go test flags and packages]   (make test's $(GOTEST) under .ci/run)
//	timetable exec TESTBINARY [args]                 (the -exec wrapper go-test passes to go test)
//	timetable report [-budget 45m] [-start UNIX]     (.ci/run's last word)
//
// The records go to the directory $TIMETABLE: steps.tsv (one line a step,
// written by .ci/run and the Makefile's step macro), packages.tsv and
// tests.tsv (written by go-test). Without $TIMETABLE go-test only prints.
//
// It is not a test runner of its own: go test runs the tests, and a
// package's wall time is the one go test reports (the test binary's run;
// compiling is in the step's time). CPU is the user+system time of the
// test binary and every process it started and waited for (rusage of a
// reaped child includes its reaped descendants on Linux), so kube-apiserver
// and etcd count with the package that started them.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var code int
	switch os.Args[1] {
	case "go-test":
		code = goTest(os.Args[2:], os.Getenv("TIMETABLE"))
	case "exec":
		code = execTestBinary(os.Args[2:], os.Stdout)
	case "report":
		code = report(os.Args[2:], os.Getenv("TIMETABLE"))
	default:
		usage()
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: timetable go-test [go test args] | exec TESTBINARY [args] | report [-budget D] [-start UNIX]")
	os.Exit(2)
}
