package sharedendpoint

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// An upstream's own log, read back as the time spans of the connections or
// requests it served, to see how many of our probes it held at once.

// span is one connection or request as the upstream logged it.
type span struct{ start, end time.Time }

// peakConcurrency is the most spans open at one instant. A span that ends
// when another starts (same millisecond) does not overlap it: the prober
// starts a probe when one finishes.
func peakConcurrency(spans []span) int {
	type event struct {
		at    time.Time
		delta int
	}
	var events []event
	for _, s := range spans {
		events = append(events, event{s.start, +1}, event{s.end, -1})
	}
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // ends first
	})
	open, peak := 0, 0
	for _, e := range events {
		open += e.delta
		peak = max(peak, open)
	}
	return peak
}

var (
	// tinyproxy at LogLevel Info: "CONNECT   Dec 04 15:18:34.076 [24916]: Connect (file descriptor 4): 127.0.0.1",
	// "INFO      Dec 04 15:18:34.092 [24916]: Closed connection between local client (fd:4) and remote client (fd:5)",
	// and between them lines about the client's descriptor such as
	// "Request (file descriptor 4)" or "Client (file descriptor: 4) closed socket before read."
	tinyproxyLine  = regexp.MustCompile(`^\S+\s+(\w{3} \d\d \d\d:\d\d:\d\d\.\d{3}) \[\d+\]: (.*)$`)
	tinyproxyOpen  = regexp.MustCompile(`^Connect \(file descriptor (\d+)\)`)
	tinyproxyClose = regexp.MustCompile(`^Closed connection between local client \(fd:(\d+)\)`)
	tinyproxyAbout = regexp.MustCompile(`\(file descriptor:? (\d+)\)`)
)

// tinyproxyConnections reads the client connections out of tinyproxy's log.
// A connection ends at its "Closed connection" line; one that fails (a
// client that hangs up before its request, a target that refuses) has no
// such line, and ends at the last line about its descriptor before the
// descriptor is taken again, or before the log ends.
func tinyproxyConnections(log string) ([]span, error) {
	const layout = "Jan 02 15:04:05.000"
	type conn struct{ start, last time.Time }
	open := map[string]*conn{}
	var spans []span
	for _, line := range strings.Split(log, "\n") {
		m := tinyproxyLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(layout, m[1])
		if err != nil {
			return nil, fmt.Errorf("tinyproxy log line %q: %w", line, err)
		}
		if fd := tinyproxyOpen.FindStringSubmatch(m[2]); fd != nil {
			if c := open[fd[1]]; c != nil {
				spans = append(spans, span{c.start, c.last})
			}
			open[fd[1]] = &conn{at, at}
			continue
		}
		if fd := tinyproxyClose.FindStringSubmatch(m[2]); fd != nil {
			if c := open[fd[1]]; c != nil {
				spans = append(spans, span{c.start, at})
				delete(open, fd[1])
			}
			continue
		}
		if fd := tinyproxyAbout.FindStringSubmatch(m[2]); fd != nil && open[fd[1]] != nil {
			open[fd[1]].last = at
		}
	}
	for _, c := range open {
		spans = append(spans, span{c.start, c.last})
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	return spans, nil
}

// squidRequests reads the requests out of squid's access log (its native
// format: the end time in seconds with milliseconds, then the elapsed
// milliseconds).
func squidRequests(log string) ([]span, error) {
	var spans []span
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		end, err1 := strconv.ParseFloat(f[0], 64)
		elapsed, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("squid access log line %q: not <end time> <elapsed ms>", line)
		}
		endAt := time.UnixMilli(int64(end*1000 + 0.5))
		spans = append(spans, span{endAt.Add(-time.Duration(elapsed) * time.Millisecond), endAt})
	}
	return spans, nil
}
