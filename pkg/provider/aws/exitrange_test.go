package aws

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

func TestRunInputAsksForAPrefixOnlyWhenTheSpecOptsIn(t *testing.T) {
	for name, tc := range map[string]struct {
		exitRange          bool
		wantPrefixes       *int32
		wantAddresses      *int32
		wantExitRangeLabel string
	}{
		"off": {},
		"on":  {exitRange: true, wantPrefixes: awssdk.Int32(1), wantAddresses: awssdk.Int32(1), wantExitRangeLabel: cloudkit.ExitRangeIPv6},
	} {
		t.Run(name, func(t *testing.T) {
			proxy := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: crawlv1alpha1.ProxySpec{AWS: &crawlv1alpha1.AWSProvider{IPv6ExitRange: tc.exitRange}}}
			in := runInput(provider.CreateRequest{Name: "px-1", Proxy: proxy}, "c", "", launchSpec{instanceType: "t3.micro"}, 0)
			nic := in.NetworkInterfaces[0]
			got := []any{nic.Ipv6PrefixCount, nic.Ipv6AddressCount, instanceTags(provider.CreateRequest{Proxy: proxy}, "c")[cloudkit.LabelExitRange]}
			if diff := cmp.Diff([]any{tc.wantPrefixes, tc.wantAddresses, tc.wantExitRangeLabel}, got); diff != "" {
				t.Errorf("prefix count, address count, exit-range tag (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToInstanceReportsThePrimaryInterfacesPrefixes(t *testing.T) {
	running := &types.InstanceState{Name: types.InstanceStateNameRunning}
	nic := func(index int32, prefixes ...string) types.InstanceNetworkInterface {
		n := types.InstanceNetworkInterface{Attachment: &types.InstanceNetworkInterfaceAttachment{DeviceIndex: awssdk.Int32(index)}}
		for _, p := range prefixes {
			n.Ipv6Prefixes = append(n.Ipv6Prefixes, types.InstanceIpv6Prefix{Ipv6Prefix: awssdk.String(p)})
		}
		return n
	}
	exitTag := types.Tag{Key: awssdk.String(cloudkit.LabelExitRange), Value: awssdk.String(cloudkit.ExitRangeIPv6)}
	for name, tc := range map[string]struct {
		tags []types.Tag
		nics []types.InstanceNetworkInterface
		want []string
	}{
		"no exit range asked":   {nics: []types.InstanceNetworkInterface{nic(0, "2001:db8:1:2:3::/80")}},
		"asked, not yet shown":  {tags: []types.Tag{exitTag}},
		"the primary's, sorted": {tags: []types.Tag{exitTag}, nics: []types.InstanceNetworkInterface{nic(0, "2001:db8:1:2:4::/80", "2001:db8:1:2:3::/80"), nic(1, "2001:db8:9:9:9::/80")}, want: []string{"2001:db8:1:2:3::/80", "2001:db8:1:2:4::/80"}},
		"garbage left out":      {tags: []types.Tag{exitTag}, nics: []types.InstanceNetworkInterface{nic(0, "not-a-prefix", "192.0.2.0/28")}},
	} {
		t.Run(name, func(t *testing.T) {
			got, _ := toInstance("r", types.Instance{InstanceId: awssdk.String("i-1"), State: running, PublicIpAddress: awssdk.String("192.0.2.1"), Tags: tc.tags, NetworkInterfaces: tc.nics})
			if diff := cmp.Diff(tc.want, got.ExitRanges); diff != "" {
				t.Errorf("ExitRanges (-want +got):\n%s", diff)
			}
			if _, ok := got.Tags[cloudkit.LabelExitRange]; ok {
				t.Errorf("the exit-range tag is reported as a Proxy tag: %v", got.Tags)
			}
		})
	}
}

// TestExitRangeDiscoverReadsIMDSv2 runs the boot script's discover command
// with sh against a stubbed curl that answers as IMDSv2 does, only with
// the session token: it prints the interface's delegated prefix.
func TestExitRangeDiscoverReadsIMDSv2(t *testing.T) {
	bin := t.TempDir()
	curl := `#!/bin/sh
case "$*" in
*"-X PUT"*/latest/api/token) echo tok ;;
*"X-aws-ec2-metadata-token: tok"*/latest/meta-data/mac) echo 0a:1b:2c:3d:4e:5f ;;
*"X-aws-ec2-metadata-token: tok"*/network/interfaces/macs/0a:1b:2c:3d:4e:5f/ipv6-prefix) printf '2001:db8:1:2:3::/80\n' ;;
*) exit 22 ;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "curl"), []byte(curl), 0o755); err != nil {
		t.Fatal(err)
	}
	integration.Needs(t, "sh run as a process")
	cmd := exec.Command("sh", "-c", exitRangeBoot.Discover)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "2001:db8:1:2:3::/80\n"; got != want {
		t.Errorf("discovered %q, want %q", got, want)
	}
}
