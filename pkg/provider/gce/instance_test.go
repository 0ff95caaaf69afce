package gce

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce/compute"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

const testUID = "0f8fe8c2-4c1e-4d2a-9b1e-6a1f2e3d4c5b"

// proxyOption adjusts a test Proxy.
type proxyOption func(*crawlv1alpha1.Proxy)

func withGCE(change func(*crawlv1alpha1.GCEProvider)) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		if p.Spec.GCE == nil {
			p.Spec.GCE = &crawlv1alpha1.GCEProvider{}
		}
		change(p.Spec.GCE)
	}
}

func testProxy(opts ...proxyOption) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "crawlers", Name: "eu.proxy.01", UID: testUID},
		Spec:       crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderGCE},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func createRequest(p *crawlv1alpha1.Proxy, cloudInit []byte) provider.CreateRequest {
	return provider.CreateRequest{Name: provider.InstanceName(p.UID), Proxy: p, Tags: provider.Tags(p), CloudInit: cloudInit, SpecHash: "hash-1"}
}

func TestBuildInstanceDefaults(t *testing.T) {
	p := testProxy()
	got := buildInstance(createRequest(p, []byte("#cloud-config\n")), "europe-west1-b", &proxyaccess.Credentials{Username: "crawler", Password: "pw-1"})
	want := &compute.Instance{
		Name:        "px-0f8fe8c24c1e4d2a",
		Description: "proxy-operator instance of Proxy crawlers/eu.proxy.01",
		MachineType: "zones/europe-west1-b/machineTypes/e2-micro",
		Labels: map[string]string{
			"crawl-proxyfleet-io_managed-by":      "proxy-operator",
			"crawl-proxyfleet-io_proxy-uid":       testUID,
			"crawl-proxyfleet-io_proxy-namespace": "crawlers",
			"crawl-proxyfleet-io_proxy-name":      "eu_proxy_01",
		},
		Metadata: &compute.Metadata{Items: []*compute.MetadataItems{
			{Key: MetadataPort, Value: ptrTo("3128")},
			{Key: MetadataTags, Value: ptrTo(`{"crawl.proxyfleet.io/managed-by":"proxy-operator","crawl.proxyfleet.io/proxy-name":"eu.proxy.01","crawl.proxyfleet.io/proxy-namespace":"crawlers","crawl.proxyfleet.io/proxy-uid":"` + testUID + `"}`)},
			{Key: MetadataSpecHash, Value: ptrTo("hash-1")},
			{Key: MetadataUserData, Value: ptrTo("#cloud-config\n")},
			{Key: MetadataAuthUsername, Value: ptrTo("crawler")},
			{Key: MetadataAuthPassword, Value: ptrTo("pw-1")},
		}},
		Disks: []*compute.AttachedDisk{{
			Boot: true, AutoDelete: true, Type: "PERSISTENT",
			InitializeParams: &compute.AttachedDiskInitializeParams{SourceImage: DefaultSourceImage},
		}},
		NetworkInterfaces: []*compute.NetworkInterface{{
			Network:       DefaultNetwork,
			AccessConfigs: []*compute.AccessConfig{{Name: "External NAT", Type: "ONE_TO_ONE_NAT"}},
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("buildInstance (-want +got):\n%s", diff)
	}
}

func TestBuildInstanceFromSpec(t *testing.T) {
	tests := map[string]struct {
		opts      []proxyOption
		cloudInit []byte
		check     func(t *testing.T, vm *compute.Instance)
	}{
		"machine type by name": {
			opts:  []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.MachineType = "e2-small" })},
			check: wantField("machineType", func(vm *compute.Instance) any { return vm.MachineType }, "zones/zone-a/machineTypes/e2-small"),
		},
		"machine type as a path": {
			opts:  []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.MachineType = "zones/zone-a/machineTypes/custom-2-4096" })},
			check: wantField("machineType", func(vm *compute.Instance) any { return vm.MachineType }, "zones/zone-a/machineTypes/custom-2-4096"),
		},
		"source image": {
			opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.SourceImage = "projects/p/global/images/squid-1" })},
			check: wantField("sourceImage", func(vm *compute.Instance) any { return vm.Disks[0].InitializeParams.SourceImage },
				"projects/p/global/images/squid-1"),
		},
		"network by name": {
			opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.Network = "crawl" })},
			check: wantField("nic", func(vm *compute.Instance) any {
				return [2]string{vm.NetworkInterfaces[0].Network, vm.NetworkInterfaces[0].Subnetwork}
			}, [2]string{"global/networks/crawl", ""}),
		},
		"subnetwork only": {
			opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.Subnetwork = "crawl-eu" })},
			check: wantField("nic", func(vm *compute.Instance) any {
				return [2]string{vm.NetworkInterfaces[0].Network, vm.NetworkInterfaces[0].Subnetwork}
			},
				[2]string{"", "regions/zone/subnetworks/crawl-eu"}),
		},
		"network and subnetwork paths": {
			opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) {
				g.Network, g.Subnetwork = "projects/host/global/networks/shared", "projects/host/regions/europe-west1/subnetworks/crawl"
			})},
			check: wantField("nic", func(vm *compute.Instance) any {
				return [2]string{vm.NetworkInterfaces[0].Network, vm.NetworkInterfaces[0].Subnetwork}
			},
				[2]string{"projects/host/global/networks/shared", "projects/host/regions/europe-west1/subnetworks/crawl"}),
		},
		"network tags": {
			opts:  []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.NetworkTags = []string{"proxy", "crawl"} })},
			check: wantField("tags", func(vm *compute.Instance) any { return vm.Tags }, &compute.Tags{Items: []string{"proxy", "crawl"}}),
		},
		"spot": {
			opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.Spot = true })},
			check: wantField("scheduling", func(vm *compute.Instance) any { return vm.Scheduling }, &compute.Scheduling{
				ProvisioningModel: "SPOT", InstanceTerminationAction: "DELETE", AutomaticRestart: ptrTo(false), OnHostMaintenance: "TERMINATE",
			}),
		},
		"on-demand has default scheduling": {
			check: wantField("scheduling", func(vm *compute.Instance) any { return vm.Scheduling }, (*compute.Scheduling)(nil)),
		},
		"port recorded": {
			opts:  []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.Port = 8888 })},
			check: wantField("port", func(vm *compute.Instance) any { v, _ := metadataValue(vm, MetadataPort); return v }, "8888"),
		},
		"egress ranges in the metadata": {
			opts: []proxyOption{func(p *crawlv1alpha1.Proxy) {
				p.Spec.Egress = &crawlv1alpha1.ProxyEgress{AllowCIDRs: []crawlv1alpha1.CIDR{"10.20.0.0/16", "fd00:1::/64"}, DenyCIDRs: []crawlv1alpha1.CIDR{"10.20.3.0/24"}}
			}},
			check: wantField("egress", func(vm *compute.Instance) any {
				a, _ := metadataValue(vm, MetadataEgressAllow)
				d, _ := metadataValue(vm, MetadataEgressDeny)
				return [2]string{a, d}
			}, [2]string{"10.20.0.0/16 fd00:1::/64", "10.20.3.0/24"}),
		},
		"no egress, no egress metadata": {
			check: wantField("egress", func(vm *compute.Instance) any {
				_, a := metadataValue(vm, MetadataEgressAllow)
				_, d := metadataValue(vm, MetadataEgressDeny)
				return a || d
			}, false),
		},
		"no cloud-init, no user-data": {
			check: wantField("user-data", func(vm *compute.Instance) any { _, ok := metadataValue(vm, MetadataUserData); return ok }, false),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			zone := "zone-a"
			if name == "subnetwork only" {
				zone = "zone-b" // region "zone"
			}
			tc.check(t, buildInstance(createRequest(testProxy(tc.opts...), tc.cloudInit), zone, nil))
		})
	}
}

func wantField(what string, get func(*compute.Instance) any, want any) func(*testing.T, *compute.Instance) {
	return func(t *testing.T, vm *compute.Instance) {
		t.Helper()
		if diff := cmp.Diff(want, get(vm)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", what, diff)
		}
	}
}

func TestLocation(t *testing.T) {
	tests := map[string]struct {
		opts                        []proxyOption
		defaultProject, defaultZone string
		wantProject, wantZone       string
		wantErr                     bool
	}{
		"flag defaults":     {defaultProject: "p", defaultZone: "z", wantProject: "p", wantZone: "z"},
		"spec wins":         {opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.Project, g.Zone = "sp", "sz" })}, defaultProject: "p", defaultZone: "z", wantProject: "sp", wantZone: "sz"},
		"spec zone only":    {opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.Zone = "sz" })}, defaultProject: "p", wantProject: "p", wantZone: "sz"},
		"no project at all": {defaultZone: "z", wantErr: true},
		"no zone at all":    {defaultProject: "p", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			project, zone, err := location(testProxy(tc.opts...), tc.defaultProject, tc.defaultZone)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if project != tc.wantProject || zone != tc.wantZone {
				t.Errorf("location = %s/%s, want %s/%s", project, zone, tc.wantProject, tc.wantZone)
			}
		})
	}
}

// vmOption adjusts a VM as the API returns it.
type vmOption func(*compute.Instance)

func status(s string) vmOption { return func(vm *compute.Instance) { vm.Status = s } }

func natIP(ip string) vmOption {
	return func(vm *compute.Instance) { vm.NetworkInterfaces[0].AccessConfigs[0].NatIP = ip }
}

func apiVM(opts ...vmOption) *compute.Instance {
	vm := buildInstance(createRequest(testProxy(withGCE(func(g *crawlv1alpha1.GCEProvider) { g.Port = 8080 })), nil), "zone-a", nil)
	vm.Zone = "https://www.googleapis.com/compute/v1/projects/proj/zones/zone-a"
	vm.Status = "RUNNING"
	for _, o := range opts {
		o(vm)
	}
	return vm
}

func TestToInstance(t *testing.T) {
	tags := provider.Tags(testProxy())
	id := "proj/zone-a/px-0f8fe8c24c1e4d2a"
	tests := map[string]struct {
		vm   *compute.Instance
		want provider.Instance
	}{
		"provisioning":          {vm: apiVM(status("PROVISIONING")), want: provider.Instance{ID: id, State: provider.StateProvisioning, Tags: tags, SpecHash: "hash-1", Message: "provisioning"}},
		"staging":               {vm: apiVM(status("STAGING"), natIP("127.0.0.7")), want: provider.Instance{ID: id, State: provider.StateProvisioning, Tags: tags, SpecHash: "hash-1", Message: "staging"}},
		"repairing":             {vm: apiVM(status("REPAIRING")), want: provider.Instance{ID: id, State: provider.StateProvisioning, Tags: tags, SpecHash: "hash-1", Message: "repairing"}},
		"running":               {vm: apiVM(natIP("127.0.0.7")), want: provider.Instance{ID: id, State: provider.StateRunning, IP: "127.0.0.7", Port: 8080, Tags: tags, SpecHash: "hash-1", Message: "running"}},
		"running without an IP": {vm: apiVM(), want: provider.Instance{ID: id, State: provider.StateProvisioning, Tags: tags, SpecHash: "hash-1", Message: "running without an external IP"}},
		"stopping":              {vm: apiVM(status("STOPPING")), want: provider.Instance{ID: id, State: provider.StateStopped, Tags: tags, SpecHash: "hash-1", Message: "stopping"}},
		"stopped":               {vm: apiVM(status("STOPPED")), want: provider.Instance{ID: id, State: provider.StateStopped, Tags: tags, SpecHash: "hash-1", Message: "stopped"}},
		"suspending":            {vm: apiVM(status("SUSPENDING")), want: provider.Instance{ID: id, State: provider.StateStopped, Tags: tags, SpecHash: "hash-1", Message: "suspending"}},
		"suspended":             {vm: apiVM(status("SUSPENDED")), want: provider.Instance{ID: id, State: provider.StateStopped, Tags: tags, SpecHash: "hash-1", Message: "suspended"}},
		"terminated, with a message": {
			vm:   apiVM(status("TERMINATED"), func(vm *compute.Instance) { vm.StatusMessage = "Instance was preempted." }),
			want: provider.Instance{ID: id, State: provider.StateStopped, Tags: tags, SpecHash: "hash-1", Message: "terminated: Instance was preempted."},
		},
		"unknown status": {vm: apiVM(status("HIBERNATING")), want: provider.Instance{ID: id, State: provider.StateProvisioning, Tags: tags, SpecHash: "hash-1", Message: "hibernating"}},
		"no port recorded": {
			vm:   apiVM(natIP("127.0.0.7"), func(vm *compute.Instance) { vm.Metadata.Items = vm.Metadata.Items[1:] }),
			want: provider.Instance{ID: id, State: provider.StateRunning, IP: "127.0.0.7", Port: DefaultPort, Tags: tags, SpecHash: "hash-1", Message: "running"},
		},
		"tags from labels when metadata has none": {
			vm:   apiVM(natIP("127.0.0.7"), func(vm *compute.Instance) { vm.Metadata = nil }),
			want: provider.Instance{ID: id, State: provider.StateRunning, IP: "127.0.0.7", Port: DefaultPort, Tags: tags, Message: "running"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, toInstance("proj", "ignored", tc.vm)); diff != "" {
				t.Errorf("toInstance (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseID(t *testing.T) {
	tests := map[string]struct {
		id                  string
		project, zone, name string
		ok                  bool
	}{
		"valid":          {id: "p/z/n", project: "p", zone: "z", name: "n", ok: true},
		"too few parts":  {id: "z/n"},
		"too many parts": {id: "p/z/n/x"},
		"empty part":     {id: "p//n"},
		"pod-style":      {id: "namespace/name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			project, zone, vmName, ok := parseID(tc.id)
			if ok != tc.ok || project != tc.project || zone != tc.zone || vmName != tc.name {
				t.Errorf("parseID(%q) = %q %q %q %v", tc.id, project, zone, vmName, ok)
			}
			if ok && instanceID(project, zone, vmName) != tc.id {
				t.Errorf("instanceID does not give %q back", tc.id)
			}
		})
	}
}
