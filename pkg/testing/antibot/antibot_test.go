package antibot

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fetch gets path from srv leaving from source, and returns the status and
// the body.
func fetch(t *testing.T, client *http.Client, source, url string) (int, string) {
	t.Helper()
	tr := client.Transport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}).DialContext
	tr.DisableKeepAlives = true
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestBansEachAddressAfterItsBudget(t *testing.T) {
	site := Start(t, Options{BanAfter: 3, ChallengeShare: 0.5, Seed: 7})
	// pair finds an address banned with a 403 and one with a challenge
	// page in 127.0.<third>.0/24.
	pair := func(third int) (forbidden, challenged string) {
		for i := 2; i < 250 && (forbidden == "" || challenged == ""); i++ {
			ip := fmt.Sprintf("127.0.%d.%d", third, i)
			if site.Challenges(ip) {
				challenged = ip
			} else {
				forbidden = ip
			}
		}
		if forbidden == "" || challenged == "" {
			t.Fatal("no address of each kind: the hash ignores the share")
		}
		return forbidden, challenged
	}
	want := map[string]Stats{}
	for third, srv := range []struct {
		name string
		url  string
		c    *http.Client
	}{{"http", site.HTTP.URL, site.HTTP.Client()}, {"https", site.HTTPS.URL, site.HTTPS.Client()}} {
		forbidden, challenged := pair(third + 3)
		t.Run(srv.name, func(t *testing.T) {
			for _, ip := range []string{forbidden, challenged} {
				for i := 1; i <= 3; i++ {
					if code, body := fetch(t, srv.c, ip, srv.url+"/page/1"); code != 200 || strings.Contains(body, ChallengeMarker) {
						t.Fatalf("%s request %d: %d %q, want the page", ip, i, code, body)
					}
				}
			}
			if code, body := fetch(t, srv.c, forbidden, srv.url+"/page/2"); code != http.StatusForbidden || strings.Contains(body, ChallengeMarker) {
				t.Errorf("%s past its budget: %d, want 403", forbidden, code)
			}
			if code, body := fetch(t, srv.c, challenged, srv.url+"/page/2"); code != http.StatusOK || !strings.Contains(body, ChallengeMarker) {
				t.Errorf("%s past its budget: %d %q, want a 200 challenge page", challenged, code, body)
			}
		})
		want[forbidden] = Stats{Requests: 4, Served: 3, Banned: true}
		want[challenged] = Stats{Requests: 4, Served: 3, Banned: true}
	}
	if diff := cmp.Diff(want, site.Seen()); diff != "" {
		t.Errorf("Seen (-want +got):\n%s", diff)
	}
	// The ban is per address, over both schemes: one site.
	forbidden, _ := pair(3)
	if code, _ := fetch(t, site.HTTPS.Client(), forbidden, site.HTTPS.URL+"/page/3"); code != http.StatusForbidden {
		t.Errorf("an address banned over http got %d over https, want 403", code)
	}
}

func TestNotFoundOutsidePages(t *testing.T) {
	site := Start(t, Options{})
	if code, _ := fetch(t, site.HTTP.Client(), "127.0.0.1", site.HTTP.URL+"/admin"); code != http.StatusNotFound {
		t.Errorf("/admin = %d, want 404", code)
	}
	if len(site.Seen()) != 0 {
		t.Errorf("a 404 was counted: %v", site.Seen())
	}
}
