package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func exitIP(ip string) memberOption { return func(m *Member) { m.ExitIP = ip } }

// TestDecideRerollsDuplicateExitIPs: of two members that leave from one
// exit IP the younger is replaced, within the same budget as any stale
// member; members without a measured exit IP are never duplicates.
func TestDecideRerollsDuplicateExitIPs(t *testing.T) {
	evidence := "exit IP 127.0.9.1 is an older member's too"
	tests := map[string]struct {
		pol     Policy
		members []Member
		want    planOf
	}{
		"distinct exit IPs: nothing to do": {
			pol:     policy(3, 1, 0),
			members: []Member{member("a", exitIP("127.0.9.1")), member("b", exitIP("127.0.9.2")), member("c", exitIP("127.0.9.3"))},
		},
		"unmeasured members are not duplicates": {
			pol:     policy(3, 1, 0),
			members: members(3),
		},
		"the younger of two drains once a successor is Ready": {
			pol: policy(3, 1, 0),
			members: []Member{member("a", exitIP("127.0.9.1"), created(2*time.Hour)), member("b", exitIP("127.0.9.1"), leases(1)),
				member("c", exitIP("127.0.9.3")), member("d", exitIP("127.0.9.4"))},
			want: planOf{Drain: []Removal{{Name: "b", Reason: ReasonDuplicateExitIP, Leases: 1, Evidence: evidence}}},
		},
		"a full pool makes the successor first": {
			pol:     policy(2, 1, 0),
			members: []Member{member("a", exitIP("127.0.9.1"), created(2*time.Hour)), member("b", exitIP("127.0.9.1"))},
			want:    planOf{Create: 1},
		},
		"same age: the later name goes": {
			pol:     policy(2, 1, 1),
			members: []Member{member("y", exitIP("127.0.9.1")), member("x", exitIP("127.0.9.1"))},
			want:    planOf{Create: 1, Drain: []Removal{{Name: "y", Reason: ReasonDuplicateExitIP, Evidence: evidence}}},
		},
		"a draining member's IP is free for the others": {
			pol:     policy(2, 1, 0),
			members: []Member{member("a", exitIP("127.0.9.1"), drainingFor(time.Second), leases(1)), member("b", exitIP("127.0.9.1")), member("c", exitIP("127.0.9.2"))},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := Decide(tc.pol, tc.members, t0)
			got := planOf{Create: p.Create, Drain: p.Drain, Delete: p.Delete, Paused: p.RemediationPaused}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
