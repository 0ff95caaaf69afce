package sharedendpoint

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPeakConcurrency(t *testing.T) {
	at := func(ms int) time.Time { return time.UnixMilli(int64(ms)) }
	tests := []struct {
		name  string
		spans []span
		want  int
	}{
		{"none", nil, 0},
		{"one", []span{{at(0), at(10)}}, 1},
		{"back to back", []span{{at(0), at(10)}, {at(10), at(20)}}, 1},
		{"overlapping", []span{{at(0), at(10)}, {at(5), at(20)}, {at(6), at(7)}, {at(15), at(30)}}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := peakConcurrency(tc.spans); got != tc.want {
				t.Errorf("peakConcurrency = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestTinyproxyConnections(t *testing.T) {
	log := `INFO      Dec 04 15:18:32.005 [24916]: Starting main loop. Accepting connections.
CONNECT   Dec 04 15:18:34.060 [24916]: Connect (file descriptor 4): 127.0.0.1
ERROR     Dec 04 15:18:34.061 [24916]: read_request_line: Client (file descriptor: 4) closed socket before read.
CONNECT   Dec 04 15:18:34.076 [24916]: Connect (file descriptor 4): 127.0.0.1
CONNECT   Dec 04 15:18:34.077 [24916]: Request (file descriptor 4): GET http://127.0.0.1:38912/ HTTP/1.1
CONNECT   Dec 04 15:18:34.080 [24916]: Connect (file descriptor 6): 127.0.0.1
CONNECT   Dec 04 15:18:34.084 [24916]: Established connection to host "127.0.0.1" using file descriptor 5.
INFO      Dec 04 15:18:34.092 [24916]: Closed connection between local client (fd:4) and remote client (fd:5)
CONNECT   Dec 04 15:18:34.100 [24916]: Connect (file descriptor 4): 127.0.0.1
CONNECT   Dec 04 15:18:34.101 [24916]: Request (file descriptor 4): GET http://127.0.0.1:1/ HTTP/1.1
INFO      Dec 04 15:18:34.120 [24916]: Closed connection between local client (fd:6) and remote client (fd:7)
`
	at := func(s string) time.Time {
		v, err := time.Parse("Jan 02 15:04:05.000", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	got, err := tinyproxyConnections(log)
	if err != nil {
		t.Fatal(err)
	}
	want := []span{
		{at("Dec 04 15:18:34.060"), at("Dec 04 15:18:34.061")}, // hung up before its request: no close line
		{at("Dec 04 15:18:34.076"), at("Dec 04 15:18:34.092")},
		{at("Dec 04 15:18:34.080"), at("Dec 04 15:18:34.120")},
		{at("Dec 04 15:18:34.100"), at("Dec 04 15:18:34.101")}, // still open when the log ends
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(span{})); diff != "" {
		t.Errorf("tinyproxyConnections (-want +got):\n%s", diff)
	}
}

func TestSquidRequests(t *testing.T) {
	got, err := squidRequests("1733325514.092     15 127.0.0.1 TCP_MISS/204 160 GET http://127.0.0.1:1/generate_204 - HIER_DIRECT/127.0.0.1 -\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []span{{time.UnixMilli(1733325514077), time.UnixMilli(1733325514092)}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(span{})); diff != "" {
		t.Errorf("squidRequests (-want +got):\n%s", diff)
	}
	if _, err := squidRequests("garbage line\n"); err == nil {
		t.Error("a line that is not squid's format: no error")
	}
}
