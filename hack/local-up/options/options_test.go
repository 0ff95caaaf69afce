package options

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// make run's development defaults replace the operator's, and a flag on
// the command line still wins over them.
func TestDevelopmentDefaultsAndOverrides(t *testing.T) {
	type view struct {
		LeaderElect                       bool
		LeaseAuth, Providers              string
		LeaseAddr, MetricsAddr            string
		LocalStateDir, Dir, GatewayListen string
	}
	for name, tc := range map[string]struct {
		args []string
		want view
	}{
		"defaults": {want: view{LeaseAuth: "none", Providers: "local", LeaseAddr: "127.0.0.1:8080",
			MetricsAddr: "127.0.0.1:9090", Dir: ".local", GatewayListen: "127.0.0.1:3129"}},
		"overridden": {args: []string{"--lease-addr=127.0.0.1:18080", "--dir=/tmp/x", "--gateway-listen="},
			want: view{LeaseAuth: "none", Providers: "local", LeaseAddr: "127.0.0.1:18080",
				MetricsAddr: "127.0.0.1:9090", Dir: "/tmp/x"}},
	} {
		t.Run(name, func(t *testing.T) {
			var o Options
			if err := NewFlagSet(&o).Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got := view{o.Operator.LeaderElect, o.Operator.LeaseAuth, strings.Join(o.Operator.Providers, ","),
				o.Operator.LeaseAddr, o.Operator.MetricsAddr, o.LocalProvider().StateDir, o.Dir, o.Gateway.Listen}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("options (-want +got):\n%s", diff)
			}
		})
	}
}
