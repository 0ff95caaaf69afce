package forwardproxy

import (
	"bytes"
	"net"
	"strconv"
	"strings"
)

// ListeningMessage is the message of the one log line cmd/forward-proxy
// writes once it accepts connections, with the key "addr":
//
//	I0102 15:04:05.000000   42 main.go:99] "listening" addr=127.0.0.1:41234
//
// Whoever starts the binary with --listen=127.0.0.1:0 (the local provider,
// tests) finds the port with [ParseListeningLine].
const ListeningMessage = "listening"

// LogAddr is a log value that klog's text format prints without quotes
// (addr=127.0.0.1:3128), so the line reads the same to people and scripts.
type LogAddr string

func (a LogAddr) String() string { return string(a) }

// WriteText implements klog's text serialisation hook.
func (a LogAddr) WriteText(b *bytes.Buffer) { b.WriteString(string(a)) }

// MarshalLog implements logr.Marshaler (JSON and other formats).
func (a LogAddr) MarshalLog() any { return string(a) }

// ParseListeningLine returns the address in a "listening" log line, quoted
// or not; ok is false for any other line.
func ParseListeningLine(line string) (addr string, ok bool) {
	i := strings.Index(line, `"`+ListeningMessage+`"`)
	if i < 0 {
		return "", false
	}
	for f := range strings.FieldsSeq(line[i+len(ListeningMessage)+2:]) {
		v, found := strings.CutPrefix(f, "addr=")
		if !found {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		}
		if _, _, err := net.SplitHostPort(v); err != nil {
			return "", false
		}
		return v, true
	}
	return "", false
}
