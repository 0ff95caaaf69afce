// Command echo is the HTTP target of the real-node suite
// (pkg/testsuites/realnode): it answers every request with 200 and the
// caller's address, so a test sees which proxy a request left through. make
// cluster builds it into an image and imports it.
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
	flag.Parse()
	if *showVersion {
		fmt.Println("echo " + version)
		return
	}
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
