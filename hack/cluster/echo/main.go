// Command echo is the HTTP target of the real-node suite
// (pkg/testsuites/realnode): it answers every request with 200 and the
// caller's address, so a test sees which proxy a request left through. With
// --hold-mib it also holds that much memory, touched, for as long as it runs:
// the suite's memory-pressure step makes the node short of memory with it.
// make cluster builds it into an image and imports it.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

// version is set by hack/image (-X main.version).
var version = "dev"

func main() {
	listen := flag.String("listen", ":8080", "address to serve on")
	showVersion := flag.Bool("version", false, "print the version and exit")
	holdMiB := flag.Int("hold-mib", 0, "MiB of memory to allocate, touch and hold while serving")
	holdAfter := flag.Duration("hold-after", 0, "wait this long before allocating --hold-mib (serving meanwhile)")
	flag.Parse()
	if *showVersion {
		fmt.Println("echo " + version)
		return
	}
	time.AfterFunc(*holdAfter, func() { held = hold(*holdMiB) })
	srv := &http.Server{
		Addr:              *listen,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			fmt.Fprintln(w, host)
		}),
	}
	log.Printf("echo %s listening on %s", version, *listen)
	if err := srv.ListenAndServe(); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// held keeps hold's memory reachable, so that the collector never frees it.
var held []byte

// hold allocates mib MiB and writes every page, so that all of it is resident.
func hold(mib int) []byte {
	b := make([]byte, mib<<20)
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	if mib > 0 {
		log.Printf("holding %d MiB", mib)
	}
	return b
}
