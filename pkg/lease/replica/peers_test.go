package replica

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
)

// TestPeerDialsComeFromTheListenAddress: a replica whose peer port listens
// on one IP dials its peers from that IP, for Raft and for forwarded calls
// alike, so that one address stands for the replica both ways (a filter on
// it cuts the replica off); listening on every address leaves the choice
// to the system.
func TestPeerDialsComeFromTheListenAddress(t *testing.T) {
	ca, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	peerTLS, err := ca.PeerTLS("peer", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := listenPeers("127.0.0.22:0", "127.0.0.22:7400", peerTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	addr := peer.ln.Addr().String()
	selfTLS, err := ca.PeerTLS("self", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	accepted := func(conns chan net.Conn) string {
		t.Helper()
		select {
		case c := <-conns:
			defer c.Close()
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			return host
		case <-time.After(10 * time.Second):
			t.Fatal("the peer accepted no connection")
			return ""
		}
	}
	for name, tc := range map[string]struct {
		listen string
		want   []string // the source of the Raft dial, then of the forwarded call's
	}{
		"one IP":        {listen: "127.0.0.21:7400", want: []string{"127.0.0.21", "127.0.0.21"}},
		"every address": {listen: ":7400", want: []string{"127.0.0.1", "127.0.0.1"}},
	} {
		t.Run(name, func(t *testing.T) {
			from := dialFrom(tc.listen)
			var got []string
			c, err := newStreamLayer(peer, selfTLS, from).Dial(raft.ServerAddress(addr), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got = append(got, accepted(peer.raftConns))

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+peerProgressPath, nil)
			if err != nil {
				t.Fatal(err)
			}
			client := peerClient(selfTLS, from)
			defer client.CloseIdleConnections()
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			got = append(got, accepted(peer.h2Conns))
			cancel()
			<-done
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("dial sources (-want +got):\n%s", diff)
			}
		})
	}
}
