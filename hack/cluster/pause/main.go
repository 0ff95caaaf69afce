// Command pause is the sandbox ("pause") container of make cluster's node: the
// first process of every Pod, holding its namespaces until the kubelet stops it.
// make cluster builds it into an image and imports it into containerd, because no
// registry with the upstream pause image is reachable from the project's machines.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set by hack/image (-X main.version).
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("pause " + version)
		return
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		// As PID 1 of a shared PID namespace it reaps what others leave behind.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
