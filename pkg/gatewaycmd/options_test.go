package gatewaycmd

import (
	"flag"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFlagsAndValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		// wantErrs are substrings of the validation error, one per bad flag.
		wantErrs []string
		wantURLs []string
	}{
		{name: "defaults", wantURLs: []string{DefaultLeaseURL}},
		{name: "several lease URLs replace the default", args: []string{"--lease-url=http://a:8080,http://b:8080", "--lease-url", "http://c:8080"},
			wantURLs: []string{"http://a:8080", "http://b:8080", "http://c:8080"}},
		{name: "every bad flag named", args: []string{"--listen=nope", "--lease-url=ftp://x", "--lease-auth=maybe", "--gateway-wait=2m", "--leader-wait=0s", "--drain-delay=-1s"},
			wantErrs: []string{"--listen:", "--lease-url:", "--lease-auth:", "--gateway-wait:", "--leader-wait:", "--drain-delay:"}, wantURLs: []string{"ftp://x"}},
		{name: "metrics and listen apart", args: []string{"--listen=:9090"}, wantErrs: []string{"--metrics-addr: must differ from --listen"}, wantURLs: []string{DefaultLeaseURL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantURLs, o.LeaseURLs); diff != "" {
				t.Errorf("LeaseURLs (-want +got):\n%s", diff)
			}
			err := o.Validate()
			if len(tc.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate passed, want errors naming %v", tc.wantErrs)
			}
			for _, want := range tc.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate error does not name %q:\n%v", want, err)
				}
			}
			if got := len(strings.Split(err.Error(), "\n")); got != len(tc.wantErrs) {
				t.Errorf("%d errors, want %d:\n%v", got, len(tc.wantErrs), err)
			}
		})
	}
}
