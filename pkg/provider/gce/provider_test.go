package gce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce/compute"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/gcetest"
)

const (
	zoneA = "test-zone-a"
	zoneB = "test-zone-b"
)

// testPassword is the password of every test Proxy's credentials Secret.
const testPassword = "pr0xy-Pa55word"

// testSecrets serves every credentials Secret a test Proxy names.
func testSecrets(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		Data:       map[string][]byte{"username": []byte("crawler"), "password": []byte(testPassword)},
	}, nil
}

// newTestProvider returns a Provider talking to fake, with the fake's
// default project and zone A as its defaults.
func newTestProvider(t *testing.T, fake *gcetest.Server, change ...func(*Options)) *Provider {
	t.Helper()
	opts := Options{Project: gcetest.DefaultProject, Zone: zoneA, Endpoint: fake.URL, HTTPClient: fake.HTTPClient(), Secrets: testSecrets}
	for _, c := range change {
		c(&opts)
	}
	p, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func withUID(uid string) proxyOption { return func(p *crawlv1alpha1.Proxy) { p.UID = types.UID(uid) } }

func inZone(zone string) proxyOption {
	return withGCE(func(g *crawlv1alpha1.GCEProvider) { g.Zone = zone })
}

// uid makes the i-th test UID; InstanceName keeps its first 16 hex digits.
func uid(i int) string { return fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i) }

func TestCreateReturnsOnceAcceptedThenRuns(t *testing.T) {
	fake := gcetest.New(t)
	p := newTestProvider(t, fake)
	ctx := context.Background()
	proxy := testProxy(withGCE(func(g *crawlv1alpha1.GCEProvider) { g.Port = 8080 }))

	inst, err := p.Create(ctx, createRequest(proxy, []byte("#cloud-config\n")))
	if err != nil {
		t.Fatal(err)
	}
	id := gcetest.DefaultProject + "/" + zoneA + "/px-0f8fe8c24c1e4d2a"
	if inst.ID != id || inst.State != provider.StateProvisioning {
		t.Errorf("Create = %+v, want %s Provisioning", inst, id)
	}
	if n := fake.Calls(gcetest.MethodOperationGet); n != 0 {
		t.Errorf("Create polled the operation %d times: it must not wait", n)
	}
	gvm, ok := fake.Instance(gcetest.DefaultProject, zoneA, "px-0f8fe8c24c1e4d2a")
	if !ok {
		t.Fatal("no VM in the fake")
	}
	vm := fromGoogle(t, gvm)
	if v, _ := metadataValue(vm, MetadataUserData); v != "#cloud-config\n" {
		t.Errorf("user-data = %q", v)
	}
	if got := vm.Labels["crawl-proxyfleet-io_proxy-uid"]; got != testUID {
		t.Errorf("uid label = %q", got)
	}

	// PROVISIONING → STAGING → RUNNING, one status per Get.
	var seen []string
	for range 3 {
		inst, err := p.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, fmt.Sprintf("%s %s %s:%d", inst.State, inst.Message, inst.IP, inst.Port))
	}
	want := []string{"Provisioning provisioning :0", "Provisioning staging :0", "Running running 127.0.100.1:8080"}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("states (-want +got):\n%s", diff)
	}
}

func TestCreateExistingNameReturnsIt(t *testing.T) {
	fake := gcetest.New(t, gcetest.WithSteps(0))
	p := newTestProvider(t, fake)
	ctx := context.Background()
	req := createRequest(testProxy(), nil)
	first, err := p.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, first.ID); err != nil { // runs it
		t.Fatal(err)
	}
	again, err := p.Create(ctx, req)
	if err != nil {
		t.Fatalf("second Create: %v", err)
	}
	if again.ID != first.ID || again.State != provider.StateRunning || again.Tags[crawlv1alpha1.TagProxyUID] != testUID {
		t.Errorf("second Create = %+v, want the running VM %s", again, first.ID)
	}
	if n := len(fake.Instances()); n != 1 {
		t.Errorf("%d VMs, want 1", n)
	}

	// The same name serving another Proxy is not ours to adopt.
	other := req
	other.Tags = provider.Tags(testProxy(withUID("0f8fe8c2-4c1e-4d2a-ffff-ffffffffffff")))
	if _, err := p.Create(ctx, other); provider.Class(err) != provider.ErrPermanent {
		t.Errorf("Create over another Proxy's VM: %v, want a permanent error", err)
	}
}

func TestCreateErrors(t *testing.T) {
	tests := map[string]struct {
		opts  []proxyOption
		fault *gcetest.APIError
		// defaults clears the provider's default project.
		noDefaultProject bool
		want             error
		wantInMessage    string
	}{
		"quota exceeded":       {fault: gcetest.QuotaExceeded(), want: provider.ErrQuotaExceeded, wantInMessage: "Quota 'CPUS' exceeded"},
		"rate limited":         {fault: gcetest.RateLimitExceeded(), want: provider.ErrQuotaExceeded},
		"429":                  {fault: &gcetest.APIError{Code: 429, Reason: "rateLimitExceeded", Message: "slow down"}, want: provider.ErrQuotaExceeded},
		"permission denied":    {fault: gcetest.Forbidden("compute.instances.create"), want: provider.ErrPermanent, wantInMessage: "compute.instances.create"},
		"backend error":        {fault: gcetest.BackendError(), want: provider.ErrTransient},
		"unknown machine type": {opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.MachineType = "e2-huge" })}, want: provider.ErrPermanent, wantInMessage: "e2-huge"},
		"unknown image": {
			opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) {
				g.SourceImage = "projects/debian-cloud/global/images/family/debian-99"
			})},
			want: provider.ErrPermanent, wantInMessage: "debian-99",
		},
		"unknown zone":    {opts: []proxyOption{inZone("mars-north1-a")}, want: provider.ErrPermanent},
		"bad network tag": {opts: []proxyOption{withGCE(func(g *crawlv1alpha1.GCEProvider) { g.NetworkTags = []string{"Not_A_Tag"} })}, want: provider.ErrPermanent},
		"no project":      {noDefaultProject: true, want: provider.ErrPermanent, wantInMessage: "--gce-project"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := gcetest.New(t)
			p := newTestProvider(t, fake, func(o *Options) {
				if tc.noDefaultProject {
					o.Project = ""
				}
			})
			if tc.fault != nil {
				fake.FailNext(gcetest.MethodInsert, tc.fault)
			}
			_, err := p.Create(context.Background(), createRequest(testProxy(tc.opts...), []byte("#cloud-config\n")))
			if got := provider.Class(err); err == nil || got != tc.want {
				t.Fatalf("Create: %v (class %v), want class %v", err, got, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Errorf("message %q does not say %q", err.Error(), tc.wantInMessage)
			}
			if n := len(fake.Instances()); n != 0 {
				t.Errorf("a failed Create left %d VMs", n)
			}
		})
	}
}

// TestInsertFailingAfterAcceptance: an accepted insert whose operation fails
// (a zone out of capacity) is provisioning while it runs, then the
// operation's error, classified, then not found (so the next create retries).
func TestInsertFailingAfterAcceptance(t *testing.T) {
	tests := map[string]struct {
		code       string
		httpStatus int
		want       error
	}{
		"zone exhausted":     {code: "ZONE_RESOURCE_POOL_EXHAUSTED", httpStatus: 503, want: provider.ErrQuotaExceeded},
		"quota":              {code: "QUOTA_EXCEEDED", httpStatus: 403, want: provider.ErrQuotaExceeded},
		"resource not found": {code: "RESOURCE_NOT_FOUND", httpStatus: 404, want: provider.ErrPermanent},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := gcetest.New(t, gcetest.WithSteps(2))
			p := newTestProvider(t, fake)
			ctx := context.Background()
			fake.FailNextInsertAsync(tc.code, "it did not work", tc.httpStatus)
			inst, err := p.Create(ctx, createRequest(testProxy(), nil))
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			got, err := p.Get(ctx, inst.ID)
			if err != nil || got.State != provider.StateProvisioning {
				t.Fatalf("Get while the insert runs = %+v, %v; want Provisioning", got, err)
			}
			_, err = p.Get(ctx, inst.ID)
			if provider.Class(err) != tc.want || !strings.Contains(err.Error(), tc.code) {
				t.Fatalf("Get once the insert failed: %v, want class %v naming %s", err, tc.want, tc.code)
			}
			if _, err := p.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
				t.Errorf("Get after the failure was reported: %v, want not found", err)
			}
		})
	}
}

func TestGetNotFound(t *testing.T) {
	fake := gcetest.New(t)
	p := newTestProvider(t, fake)
	for name, id := range map[string]string{
		"missing VM":      gcetest.DefaultProject + "/" + zoneA + "/px-nothere",
		"unknown zone":    gcetest.DefaultProject + "/nowhere-1-a/px-nothere",
		"unknown project": "no-project/" + zoneA + "/px-nothere",
		"not an ID":       "crawlers/px-nothere",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := p.Get(context.Background(), id); !errors.Is(err, provider.ErrNotFound) {
				t.Errorf("Get(%q) = %v, want ErrNotFound", id, err)
			}
		})
	}
}

func TestGetErrorsAreClassified(t *testing.T) {
	fake := gcetest.New(t)
	p := newTestProvider(t, fake)
	fake.FailNext(gcetest.MethodGet, gcetest.BackendError())
	fake.FailNext(gcetest.MethodGet, gcetest.Forbidden("compute.instances.get"))
	id := gcetest.DefaultProject + "/" + zoneA + "/px-1"
	if _, err := p.Get(context.Background(), id); provider.Class(err) != provider.ErrTransient || errors.Is(err, provider.ErrNotFound) {
		t.Errorf("503: %v, want transient", err)
	}
	if _, err := p.Get(context.Background(), id); provider.Class(err) != provider.ErrPermanent {
		t.Errorf("403: %v, want permanent", err)
	}
}

func TestDelete(t *testing.T) {
	fake := gcetest.New(t, gcetest.WithSteps(2))
	p := newTestProvider(t, fake)
	ctx := context.Background()

	if err := p.Delete(ctx, gcetest.DefaultProject+"/"+zoneA+"/px-missing"); err != nil {
		t.Errorf("deleting a missing VM: %v", err)
	}
	if err := p.Delete(ctx, "not-an-id"); err != nil {
		t.Errorf("deleting an impossible ID: %v", err)
	}

	inst, err := p.Create(ctx, createRequest(testProxy(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	// A second Delete while ours runs asks nothing more of the API.
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Errorf("Delete while deleting: %v", err)
	}
	if n := fake.Calls(gcetest.MethodDelete); n != 2 {
		t.Errorf("%d delete calls, want 2 (the missing VM and ours)", n)
	}
	got, err := p.Get(ctx, inst.ID)
	if err != nil || got.State != provider.StateStopped {
		t.Errorf("Get while deleting = %+v, %v; want Stopped", got, err)
	}
	_, _ = p.Get(ctx, inst.ID)
	if _, err := p.Get(ctx, inst.ID); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get after the delete = %v, want not found", err)
	}

	// Another operator process (no memory of our delete) is told to retry.
	inst, err = p.Create(ctx, createRequest(testProxy(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if err := newTestProvider(t, fake).Delete(ctx, inst.ID); provider.Class(err) != provider.ErrTransient {
		t.Errorf("a second process deleting a VM being deleted: %v, want transient", err)
	}
}

func TestListByTag(t *testing.T) {
	fake := gcetest.New(t, gcetest.WithZones(gcetest.DefaultProject, zoneA, zoneB), gcetest.WithZones("other-project", "other-zone-a"))
	p := newTestProvider(t, fake, func(o *Options) { o.ListPageSize = 2 })
	ctx := context.Background()

	var wantAll []string
	for i, zone := range []string{zoneA, zoneB, zoneA, zoneB, zoneA} {
		inst, err := p.Create(ctx, createRequest(testProxy(withUID(uid(i+1)), inZone(zone)), nil))
		if err != nil {
			t.Fatal(err)
		}
		wantAll = append(wantAll, inst.ID)
	}
	// A VM without our labels, and one that only looks like ours.
	fake.Put(gcetest.DefaultProject, zoneB, toGoogle(t, apiVM(func(vm *compute.Instance) { vm.Name, vm.Labels, vm.Metadata = "someone-elses", nil, nil })))
	fake.Put(gcetest.DefaultProject, zoneB, toGoogle(t, apiVM(func(vm *compute.Instance) {
		vm.Name = "lookalike"
		vm.Labels = map[string]string{labelKey(crawlv1alpha1.TagManagedBy): "someone-else"}
		vm.Metadata = nil
	})))

	all, err := p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil {
		t.Fatal(err)
	}
	wantAll = sorted(wantAll)
	if diff := cmp.Diff(wantAll, ids(all)); diff != "" {
		t.Errorf("ListByTag(managed-by) (-want +got):\n%s", diff)
	}
	var lists []gcetest.Call
	for _, c := range fake.Requests() {
		if c.Method == gcetest.MethodAggregatedList {
			lists = append(lists, c)
		}
	}
	if len(lists) != 3 {
		t.Errorf("%d aggregatedList pages, want 3 (5 VMs, 2 a page)", len(lists))
	}
	for i, c := range lists {
		if got, want := c.Query.Get("filter"), `labels.crawl-proxyfleet-io_managed-by = "proxy-operator"`; got != want {
			t.Errorf("page %d: filter %q, want %q", i, got, want)
		}
		if c.Query.Get("maxResults") != "2" || (i > 0) != (c.Query.Get("pageToken") != "") {
			t.Errorf("page %d: maxResults %q, pageToken %q", i, c.Query.Get("maxResults"), c.Query.Get("pageToken"))
		}
	}

	one, err := p.ListByTag(ctx, crawlv1alpha1.TagProxyUID, uid(4))
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 1 || one[0].ID != gcetest.DefaultProject+"/"+zoneB+"/"+provider.InstanceName(types.UID(uid(4))) || one[0].Tags[crawlv1alpha1.TagProxyUID] != uid(4) {
		t.Errorf("ListByTag(uid 4) = %+v", one)
	}

	// A VM in another project is listed once this provider has made one there.
	elsewhere, err := p.Create(ctx, createRequest(testProxy(withUID(uid(9)), withGCE(func(g *crawlv1alpha1.GCEProvider) {
		g.Project, g.Zone = "other-project", "other-zone-a"
	})), nil))
	if err != nil {
		t.Fatal(err)
	}
	all, err = p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(append(wantAll, elsewhere.ID)), ids(all)); diff != "" {
		t.Errorf("ListByTag across projects (-want +got):\n%s", diff)
	}

	// A project that only failed (a typo in one spec) is not listed: it
	// would fail every listing.
	if _, err := p.Create(ctx, createRequest(testProxy(withUID(uid(10)), withGCE(func(g *crawlv1alpha1.GCEProvider) {
		g.Project = "typo-project"
	})), nil)); provider.Class(err) != provider.ErrPermanent {
		t.Fatalf("Create in an unknown project: %v, want permanent", err)
	}
	if _, err := p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue); err != nil {
		t.Errorf("ListByTag after a create in an unknown project: %v", err)
	}

	fake.FailNext(gcetest.MethodAggregatedList, gcetest.RateLimitExceeded())
	if _, err := p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue); provider.Class(err) != provider.ErrQuotaExceeded {
		t.Errorf("a rate-limited list: %v, want a quota error", err)
	}
}

// TestCloudInitIsNeverLogged runs the provider at the highest verbosity,
// with the client library's own debug logging asked for through its
// environment, and looks for the cloud-init in everything written.
func TestCloudInitIsNeverLogged(t *testing.T) {
	t.Setenv("GOOGLE_SDK_GO_LOGGING_LEVEL", "debug")
	secret := "#cloud-config\nchpasswd: {list: 'proxy:s3cr3t-Passw0rd'}\n"

	stderr := captureStderr(t)
	var logs bytes.Buffer
	ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(10), textlogger.Output(&logs))))
	fake := gcetest.New(t, gcetest.WithSteps(0))
	p := newTestProvider(t, fake)
	inst, err := p.Create(ctx, createRequest(testProxy(), []byte(secret)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ListByTag(ctx, crawlv1alpha1.TagManagedBy, crawlv1alpha1.ManagedByValue); err != nil {
		t.Fatal(err)
	}
	fake.FailNext(gcetest.MethodInsert, &gcetest.APIError{Code: http.StatusBadRequest, Reason: "invalid", Message: "Invalid value '" + secret + "', '" + testPassword + "'"})
	_, createErr := p.Create(ctx, createRequest(testProxy(withUID(uid(2))), []byte(secret)))
	if err := p.Delete(ctx, inst.ID); err != nil {
		t.Fatal(err)
	}
	written := stderr()

	for what, text := range map[string]string{"klog output": logs.String(), "stderr": written, "an echoed error": createErr.Error()} {
		if strings.Contains(text, "s3cr3t-Passw0rd") {
			t.Errorf("the cloud-init appears in %s:\n%s", what, text)
		}
		if strings.Contains(text, testPassword) {
			t.Errorf("the proxy's password (in the VM's metadata) appears in %s:\n%s", what, text)
		}
	}
	if !strings.Contains(logs.String(), "VM insert accepted") {
		t.Errorf("the provider logged nothing at -v=10; is the test looking at the right output?\n%s", logs.String())
	}
}

// captureStderr redirects os.Stderr until the returned function is called,
// which restores it and returns what was written.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	done := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	restore := func() string {
		if os.Stderr == w {
			os.Stderr = saved
			w.Close()
		}
		return <-done
	}
	t.Cleanup(func() {
		if os.Stderr == w {
			restore()
		}
	})
	return restore
}

func ids(insts []provider.Instance) []string {
	out := make([]string, 0, len(insts))
	for _, i := range insts {
		out = append(out, i.ID)
	}
	return out
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

func TestNewChecksTheKeyWithoutQuotingIt(t *testing.T) {
	const secret = "SECRET-KEY-MATERIAL"
	pem := "-----BEGIN PRIVATE KEY-----\n" + secret + "\n-----END PRIVATE KEY-----\n"
	tests := map[string]struct {
		key     string
		wantErr string
	}{
		"a service-account key": {key: `{"type":"service_account","client_email":"po@p.iam.gserviceaccount.com","private_key":"` + strings.ReplaceAll(pem, "\n", `\n`) + `"}`},
		"truncated":             {key: `{"type":"service_account","private_key":"` + secret, wantErr: "not a JSON service-account key"},
		"a user credential":     {key: `{"type":"authorized_user","client_secret":"` + secret + `","refresh_token":"x"}`, wantErr: `type "authorized_user"`},
		"an external account":   {key: `{"type":"external_account","credential_source":{"file":"/` + secret + `"}}`, wantErr: `type "external_account"`},
		"no private key":        {key: `{"type":"service_account","client_email":"po@p.iam.gserviceaccount.com","private_key_id":"` + secret + `"}`, wantErr: "lacks client_email or private_key"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := New(context.Background(), Options{CredentialsJSON: []byte(tc.key)})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New: %v, want an error saying %q", err, tc.wantErr)
			case err != nil && strings.Contains(err.Error(), secret):
				t.Errorf("the error quotes the key: %v", err)
			}
		})
	}
}
