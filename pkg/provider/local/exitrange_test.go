package local

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// TestProcessArgsExitRanges: spec.local.exitRanges become --exit-range
// flags, and replace the loopback exit (forward-proxy refuses both); a
// malformed range is a permanent error naming the item.
func TestProcessArgsExitRanges(t *testing.T) {
	tests := map[string]struct {
		ranges        []crawlv1alpha1.CIDR
		loopbackExits bool
		wantExitArgs  []string
		wantErr       string
	}{
		"none, loopback exits": {loopbackExits: true, wantExitArgs: []string{"--source-addr=" + LoopbackExit("px-1").String()}},
		"none":                 {},
		"two ranges replace the loopback exit": {ranges: []crawlv1alpha1.CIDR{"fd00:5e55:1::/64", "198.18.5.0/29"}, loopbackExits: true,
			wantExitArgs: []string{"--exit-range=fd00:5e55:1::/64", "--exit-range=198.18.5.0/29"}},
		"malformed": {ranges: []crawlv1alpha1.CIDR{"fd00::/64", "fd00::"}, wantErr: `spec.local.exitRanges[1] "fd00::" is not a CIDR range`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &Provider{host: DefaultHost, loopbackExits: tc.loopbackExits}
			proxy := &crawlv1alpha1.Proxy{Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal,
				Local: &crawlv1alpha1.LocalProvider{ExitRanges: tc.ranges}}}
			args, err := p.processArgs(provider.CreateRequest{Name: "px-1", Proxy: proxy})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || provider.Class(err) != provider.ErrPermanent {
					t.Fatalf("err = %v, want a permanent error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var exitArgs []string
			for _, a := range args {
				if strings.HasPrefix(a, "--exit-range=") || strings.HasPrefix(a, "--source-addr=") {
					exitArgs = append(exitArgs, a)
				}
			}
			if diff := cmp.Diff(tc.wantExitArgs, exitArgs); diff != "" {
				t.Errorf("exit flags (-want +got):\n%s", diff)
			}
		})
	}
}
