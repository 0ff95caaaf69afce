package cloudkit_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/cloudkit"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

func request(name, specHash string) provider.CreateRequest {
	p := &crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "crawl", UID: "0123456789abcdef-0000"}}
	return provider.CreateRequest{Name: provider.InstanceName(p.UID), Proxy: p, Tags: provider.Tags(p), SpecHash: specHash}
}

func TestLabelsScopeAndRoundTrip(t *testing.T) {
	req := request(strings.Repeat("n", 70), "h1")
	labels := cloudkit.Labels(req, "prod", 3128)
	want := map[string]string{
		crawlv1alpha1.TagManagedBy: crawlv1alpha1.ManagedByValue, crawlv1alpha1.TagProxyUID: "0123456789abcdef-0000",
		crawlv1alpha1.TagProxyNamespace: "crawl", // the 70-character name is no label value: left out
		cloudkit.LabelClusterID:         "prod", cloudkit.LabelSpecHash: "h1", cloudkit.LabelPort: "3128",
	}
	if diff := cmp.Diff(want, labels); diff != "" {
		t.Errorf("Labels (-want +got):\n%s", diff)
	}
	if !cloudkit.Owned(labels, "prod") || cloudkit.Owned(labels, "staging") || cloudkit.Owned(labels, "") {
		t.Error("Owned: want true for prod only")
	}
	tags := cloudkit.ProxyTags(labels)
	if _, ok := tags[cloudkit.LabelClusterID]; ok || tags[crawlv1alpha1.TagProxyUID] == "" {
		t.Errorf("ProxyTags kept the kit's labels or lost the Proxy's: %v", tags)
	}
}

func TestInstanceNameIsTheKeyOfClusterProxyAndSpec(t *testing.T) {
	base := cloudkit.InstanceName(request("a", "h1"), "prod")
	if got := cloudkit.InstanceName(request("a", "h1"), "prod"); got != base {
		t.Errorf("same request, names %q and %q", base, got)
	}
	for what, other := range map[string]string{
		"another spec":    cloudkit.InstanceName(request("a", "h2"), "prod"),
		"another cluster": cloudkit.InstanceName(request("a", "h1"), "staging"),
	} {
		if other == base {
			t.Errorf("%s: same name %q", what, base)
		}
	}
	if len(base) != 28 || !strings.HasPrefix(base, "px-0123456789abcdef-") {
		t.Errorf("name %q: want px-<16 hex>-<8 hex>", base)
	}
}

func TestWalkPlacesMovesOnOnlyAfterCapacity(t *testing.T) {
	capacity := cloudkit.Classify(cloudkit.KindCapacity, errors.New("resource_unavailable"))
	lost := errors.New("connection reset")
	tests := map[string]struct {
		answers   map[string]error
		wantTried []string
		wantKind  cloudkit.Kind
		wantErr   bool
	}{
		"first place":            {answers: map[string]error{}, wantTried: []string{"a"}},
		"capacity, then success": {answers: map[string]error{"a": capacity}, wantTried: []string{"a", "b"}},
		"a lost answer stops":    {answers: map[string]error{"a": lost}, wantTried: []string{"a"}, wantErr: true, wantKind: cloudkit.KindTransient},
		"no place had capacity":  {answers: map[string]error{"a": capacity, "b": capacity, "c": capacity}, wantTried: []string{"a", "b", "c"}, wantErr: true, wantKind: cloudkit.KindCapacity},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var tried []string
			err := cloudkit.WalkPlaces([]string{"a", "b", "c"}, func(place string) error {
				tried = append(tried, place)
				return tc.answers[place]
			})
			if diff := cmp.Diff(tc.wantTried, tried); diff != "" {
				t.Errorf("tried (-want +got):\n%s", diff)
			}
			if (err != nil) != tc.wantErr || cloudkit.KindOf(err) != tc.wantKind {
				t.Errorf("err %v (kind %v), want error %v of kind %v", err, cloudkit.KindOf(err), tc.wantErr, tc.wantKind)
			}
		})
	}
}

func TestProviderErrorClasses(t *testing.T) {
	tests := map[cloudkit.Kind]error{
		cloudkit.KindCapacity:    provider.ErrQuotaExceeded,
		cloudkit.KindQuota:       provider.ErrQuotaExceeded,
		cloudkit.KindPermanent:   provider.ErrPermanent,
		cloudkit.KindRateLimited: provider.ErrTransient,
		cloudkit.KindConflict:    provider.ErrTransient,
		cloudkit.KindTransient:   provider.ErrTransient,
		cloudkit.KindNotFound:    provider.ErrTransient,
	}
	for kind, want := range tests {
		err := cloudkit.ProviderError("creating px-1", cloudkit.Classify(kind, errors.New("code")))
		if got := provider.Class(err); got != want {
			t.Errorf("%v: class %v, want %v", kind, got, want)
		}
		if notFound := errors.Is(err, provider.ErrNotFound); notFound != (kind == cloudkit.KindNotFound) {
			t.Errorf("%v: errors.Is(ErrNotFound) = %v", kind, notFound)
		}
	}
}

func TestGateHoldsCallsUntilRetryAfter(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	gate := cloudkit.NewGate(0, 1, clk)
	gate.Defer(clk.Now().Add(5 * time.Second))
	gate.Defer(clk.Now().Add(time.Second)) // earlier: changes nothing
	done := make(chan error, 1)
	go func() { done <- gate.Wait(context.Background()) }()
	waitForTimer(t, clk)
	clk.Step(4 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v 4s into a 5s Retry-After", err)
	default:
	}
	waitForTimer(t, clk)
	clk.Step(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestUserDataCarriesCredentialsAndRefusesUnknownCloudInit(t *testing.T) {
	req := request("a", "h1")
	ud, err := cloudkit.UserData("hetzner", req, &proxyaccess.Credentials{Username: "u", Password: "p'w", LeaseKeys: "k1\nk2\n"}, 8080, 32*1024)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PROXY_PORT=8080", `PROXY_AUTH_PASSWORD='p'\\''w'`, `PROXY_LEASE_KEYS='k1 k2'`, cloudkit.EnvFile} {
		if !strings.Contains(string(ud), want) {
			t.Errorf("user-data lacks %q", want)
		}
	}
	again, _ := cloudkit.UserData("hetzner", req, &proxyaccess.Credentials{Username: "u", Password: "p'w", LeaseKeys: "k1\nk2\n"}, 8080, 32*1024)
	if string(again) != string(ud) {
		t.Error("the same request built different user-data")
	}
	req.CloudInit = []byte("packages: [squid]\n")
	if _, err := cloudkit.UserData("hetzner", req, nil, 8080, 32*1024); err == nil || !strings.Contains(err.Error(), "spec.cloudInit") {
		t.Errorf("unknown cloud-init: %v, want an error naming spec.cloudInit", err)
	}
	req.CloudInit = []byte("#!/bin/sh\n" + strings.Repeat("x", 40*1024))
	if _, err := cloudkit.UserData("hetzner", req, nil, 8080, 32*1024); err == nil || !strings.Contains(err.Error(), "shorten spec.cloudInit") {
		t.Errorf("oversized: %v, want an error naming spec.cloudInit", err)
	}
}

// waitForTimer polls, with a deadline, until Wait's goroutine set a timer.
func waitForTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !clk.HasWaiters(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Wait set no timer")
		}
	}
}

func TestFlatTagsRoundTripTheLabelsThatFit(t *testing.T) {
	labels := cloudkit.Labels(request("name.with.dots", "h1"), "prod", 3128)
	tags := cloudkit.FlatTags(labels)
	for _, tag := range tags {
		if !strings.HasPrefix(tag, cloudkit.FlatTagPrefix) || strings.ContainsAny(tag, "./ ") {
			t.Errorf("tag %q: want pxo:<name>:<value> without dots or slashes", tag)
		}
	}
	want := maps.Clone(labels)
	delete(want, crawlv1alpha1.TagProxyName) // a dot is no tag character: left out
	if diff := cmp.Diff(want, cloudkit.LabelsOfFlatTags(append(tags, "crawlers", "team:search"))); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if tag, ok := cloudkit.FlatTag(crawlv1alpha1.TagProxyUID, "0123-abcd"); !ok || tag != "pxo:proxy-uid:0123-abcd" {
		t.Errorf("FlatTag: %q, %v", tag, ok)
	}
}

func TestGateCallRetriesAfterRetryAfterOnly(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	gate := cloudkit.NewGate(0, 1, clk)
	var calls []time.Time
	done := make(chan error, 1)
	go func() {
		done <- gate.Call(context.Background(), 3, time.Second, func(context.Context) error {
			calls = append(calls, clk.Now())
			if len(calls) == 1 {
				return cloudkit.RateLimited(errors.New("429"), 5*time.Second)
			}
			return cloudkit.Classify(cloudkit.KindPermanent, errors.New("400"))
		})
	}()
	waitForTimer(t, clk)
	clk.Step(5 * time.Second)
	if err := <-done; cloudkit.KindOf(err) != cloudkit.KindPermanent {
		t.Fatalf("Call: %v, want the second answer, permanent", err)
	}
	if len(calls) != 2 || calls[1].Sub(calls[0]) < 5*time.Second {
		t.Errorf("calls at %v: want two, 5s apart", calls)
	}
}

func TestRetryAfterPrefersTheHeaderThenTheReset(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := map[string]struct {
		header http.Header
		reset  time.Time
		want   time.Duration
	}{
		"Retry-After":            {header: http.Header{"Retry-After": {"7"}}, reset: now.Add(time.Minute), want: 7 * time.Second},
		"RateLimit-Reset":        {header: http.Header{}, reset: now.Add(3 * time.Second), want: 3 * time.Second},
		"a reset in the past":    {header: http.Header{}, reset: now.Add(-time.Second)},
		"a date, not a number":   {header: http.Header{"Retry-After": {"Wed, 21 Oct 2026 07:28:00 GMT"}}},
		"neither (the fallback)": {header: http.Header{}},
	}
	for name, tc := range tests {
		if got := cloudkit.RetryAfter(tc.header, tc.reset, now); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestPortOfFallsBackOnWhatIsNoPort(t *testing.T) {
	for value, want := range map[string]int32{"3129": 3129, "": 3128, "0": 3128, "70000": 3128, "x": 3128} {
		if got := cloudkit.PortOf(map[string]string{cloudkit.LabelPort: value}, 3128); got != want {
			t.Errorf("PortOf(%q) = %d, want %d", value, got, want)
		}
	}
}
