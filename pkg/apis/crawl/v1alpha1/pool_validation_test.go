package v1alpha1_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
)

var poolsGVR = crawlv1alpha1.SchemeGroupVersion.WithResource("proxypools")

// validPool is the smallest valid pool spec; each case below breaks one rule.
const validPool = `
template: {spec: {provider: local}}
`

// TestInvalidProxyPoolsAreRejected sends one manifest per ProxyPool schema
// rule to the real API server and checks the refusal names the field.
func TestInvalidProxyPoolsAreRejected(t *testing.T) {
	env := apiServer.Get(t)
	tests := map[string]struct {
		name      string // object name; default from the case name
		spec      string
		wantField string
	}{
		"template mode External": {spec: `{template: {spec: {mode: External, endpoint: {host: h, port: 1}}}}`, wantField: "spec.template.spec.mode"},
		"template without spec":  {spec: `{template: {}}`, wantField: "spec.template.spec"},
		"no template":            {spec: `{replicas: 2}`, wantField: "spec.template"},
		"template spec invalid":  {spec: `{template: {spec: {mode: Managed}}}`, wantField: "spec.template.spec.provider"},
		"replicas negative":      {spec: `{replicas: -1, template: {spec: {provider: local}}}`, wantField: "spec.replicas"},
		"surge and unavailable both zero": {spec: `{template: {spec: {provider: local}}, strategy: {maxSurge: 0, maxUnavailable: 0}}`,
			wantField: "spec.strategy.maxSurge"},
		"surge and unavailable both 0%": {spec: `{template: {spec: {provider: local}}, strategy: {maxSurge: "0%", maxUnavailable: 0}}`,
			wantField: "spec.strategy.maxSurge"},
		"unavailable zero by default, surge zero": {spec: `{template: {spec: {provider: local}}, strategy: {maxSurge: 0}}`,
			wantField: "spec.strategy.maxSurge"},
		"maxSurge negative":         {spec: `{template: {spec: {provider: local}}, strategy: {maxSurge: -1}}`, wantField: "spec.strategy.maxSurge"},
		"maxSurge not a percentage": {spec: `{template: {spec: {provider: local}}, strategy: {maxSurge: "lots"}}`, wantField: "spec.strategy.maxSurge"},
		"maxUnavailable negative":   {spec: `{template: {spec: {provider: local}}, strategy: {maxUnavailable: -2}}`, wantField: "spec.strategy.maxUnavailable"},
		"maxUnavailable bad percentage": {spec: `{template: {spec: {provider: local}}, strategy: {maxUnavailable: "10 %"}}`,
			wantField: "spec.strategy.maxUnavailable"},
		"cost without a price":        {spec: `{template: {spec: {provider: local}}, cost: {currency: USD}}`, wantField: "spec.cost"},
		"cost currency lower case":    {spec: `{template: {spec: {provider: local}}, cost: {currency: usd, perGiB: "4"}}`, wantField: "spec.cost.currency"},
		"cost price not a decimal":    {spec: `{template: {spec: {provider: local}}, cost: {currency: EUR, perInstanceHour: "1,5"}}`, wantField: "spec.cost.perInstanceHour"},
		"cost price negative":         {spec: `{template: {spec: {provider: local}}, cost: {currency: EUR, perGiB: "-1"}}`, wantField: "spec.cost.perGiB"},
		"maxAge below 10s":            {spec: `{template: {spec: {provider: local}}, maxAge: 5s}`, wantField: "spec.maxAge"},
		"maxAge not a duration":       {spec: `{template: {spec: {provider: local}}, maxAge: weekly}`, wantField: "spec.maxAge"},
		"drainTimeout not a duration": {spec: `{template: {spec: {provider: local}}, drainTimeout: later}`, wantField: "spec.drainTimeout"},
		"unhealthyTimeout zero":       {spec: `{template: {spec: {provider: local}}, remediation: {unhealthyTimeout: 0s}}`, wantField: "spec.remediation.unhealthyTimeout"},
		"maxUnhealthy negative":       {spec: `{template: {spec: {provider: local}}, remediation: {maxUnhealthy: -1}}`, wantField: "spec.remediation.maxUnhealthy"},
		"maxUnhealthy bad percentage": {spec: `{template: {spec: {provider: local}}, remediation: {maxUnhealthy: "half"}}`,
			wantField: "spec.remediation.maxUnhealthy"},
		"template sets the pool label": {spec: `{template: {metadata: {labels: {crawl.proxyfleet.io/pool: other}}, spec: {provider: local}}}`,
			wantField: "spec.template.metadata.labels"},
		"recycle without a limit": {spec: `{template: {spec: {provider: local}}, recycle: {window: 10m}}`, wantField: "spec.recycle"},
		"recycle maxBannedDomains zero": {spec: `{template: {spec: {provider: local}}, recycle: {maxBannedDomains: 0}}`,
			wantField: "spec.recycle.maxBannedDomains"},
		"recycle maxBannedDomains above 100": {spec: `{template: {spec: {provider: local}}, recycle: {maxBannedDomains: 101}}`,
			wantField: "spec.recycle.maxBannedDomains"},
		"recycle maxLeases zero": {spec: `{template: {spec: {provider: local}}, recycle: {maxLeases: 0}}`, wantField: "spec.recycle.maxLeases"},
		"recycle window below 1s": {spec: `{template: {spec: {provider: local}}, recycle: {maxBannedDomains: 3, window: 500ms}}`,
			wantField: "spec.recycle.window"},
		"recycle window above a week": {spec: `{template: {spec: {provider: local}}, recycle: {maxBannedDomains: 3, window: 200h}}`,
			wantField: "spec.recycle.window"},
		"recycle window not a duration": {spec: `{template: {spec: {provider: local}}, recycle: {maxLeases: 3, window: daily}}`,
			wantField: "spec.recycle.window"},
		"template mode External, members per instance zero": {spec: `{membersPerInstance: 0, template: {spec: {mode: External, endpoint: {host: h, port: 1}}}}`, wantField: "spec.membersPerInstance"},
		"membersPerInstance zero":                           {spec: `{template: {spec: {provider: local}}, membersPerInstance: 0}`, wantField: "spec.membersPerInstance"},
		"unknown field":                                     {spec: `{template: {spec: {provider: local}}, colour: blue}`, wantField: "spec.colour"},
		"name too long":                                     {name: strings.Repeat("a", 58), spec: validPool, wantField: "metadata.name"},
	}
	ctx := context.Background()
	client := dynamic.NewForConfigOrDie(env.Config).Resource(poolsGVR).Namespace(newNamespace(t))
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			objName := tc.name
			if objName == "" {
				objName = dnsName(name)
			}
			_, err := client.Create(ctx, poolObject(t, objName, tc.spec), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
			if err == nil {
				t.Fatalf("created; want rejection naming %s", tc.wantField)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("error %v is not Invalid or BadRequest", err)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Errorf("error does not name %s:\n%v", tc.wantField, err)
			}
		})
	}
}

// TestProxyPoolDefaults guards the cases above (the minimal pool is
// accepted) and checks the defaults the issue names.
func TestProxyPoolDefaults(t *testing.T) {
	env := apiServer.Get(t)
	ctx := context.Background()
	ns := newNamespace(t)
	client := dynamic.NewForConfigOrDie(env.Config).Resource(poolsGVR).Namespace(ns)
	created, err := client.Create(ctx, poolObject(t, "minimal", validPool), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		t.Fatal(err)
	}
	var pool crawlv1alpha1.ProxyPool
	data, _ := created.MarshalJSON()
	if err := yaml.Unmarshal(data, &pool); err != nil {
		t.Fatal(err)
	}
	one, zero, forty := intstr.FromInt32(1), intstr.FromInt32(0), intstr.FromString("40%")
	replicas := int32(1)
	want := crawlv1alpha1.ProxyPoolSpec{
		Replicas:     &replicas,
		Strategy:     crawlv1alpha1.PoolStrategy{MaxSurge: &one, MaxUnavailable: &zero},
		DrainTimeout: &metav1.Duration{Duration: 5 * 60e9},
		Remediation:  crawlv1alpha1.PoolRemediation{UnhealthyTimeout: &metav1.Duration{Duration: 5 * 60e9}, MaxUnhealthy: &forty},
	}
	got := pool.Spec
	got.Template = crawlv1alpha1.ProxyTemplate{}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if pool.Spec.Template.Spec.Mode != crawlv1alpha1.ModeManaged {
		t.Errorf("template mode defaulted to %q, want Managed", pool.Spec.Template.Spec.Mode)
	}
	// Zero replicas must survive the typed client (a pointer, not omitempty int).
	crawl := versioned.NewForConfigOrDie(env.Config)
	zeroReplicas := int32(0)
	p := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Name: "empty"}, Spec: crawlv1alpha1.ProxyPoolSpec{
		Replicas: &zeroReplicas, Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal}},
	}}
	typed, err := crawl.CrawlV1alpha1().ProxyPools(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if typed.Spec.Replicas == nil || *typed.Spec.Replicas != 0 {
		t.Errorf("replicas 0 came back as %v", typed.Spec.Replicas)
	}
}

// TestKubectlScaleProxyPool drives spec.replicas through the scale
// subresource with the real kubectl, and reads the selector back through it.
func TestKubectlScaleProxyPool(t *testing.T) {
	env := apiServer.Get(t)
	ctx := context.Background()
	ns := newNamespace(t)
	crawl := versioned.NewForConfigOrDie(env.Config)
	pool := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Name: "eu"}, Spec: crawlv1alpha1.ProxyPoolSpec{
		Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal}},
	}}
	created, err := crawl.CrawlV1alpha1().ProxyPools(ns).Create(ctx, pool, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The pool controller writes the selector; here the test plays its part.
	created.Status.Selector = crawlv1alpha1.PoolLabel + "=eu"
	created.Status.Replicas = 1
	if _, err := crawl.CrawlV1alpha1().ProxyPools(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, env.KubectlPath(), append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	kubectl("scale", "pxp/eu", "--replicas=20")
	got, err := crawl.CrawlV1alpha1().ProxyPools(ns).Get(ctx, "eu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Replicas == nil || *got.Spec.Replicas != 20 {
		t.Fatalf("after kubectl scale --replicas=20: spec.replicas = %v", got.Spec.Replicas)
	}
	scale, err := crawl.CrawlV1alpha1().ProxyPools(ns).GetScale(ctx, "eu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{int32(20), int32(1), crawlv1alpha1.PoolLabel + "=eu"},
		[]any{scale.Spec.Replicas, scale.Status.Replicas, scale.Status.Selector}); diff != "" {
		t.Errorf("scale subresource (-want +got):\n%s", diff)
	}
	// Scaling to a negative count is refused by the same schema.
	cmd := exec.CommandContext(ctx, env.KubectlPath(), "--kubeconfig", kubeconfig, "-n", ns, "scale", "pxp/eu", "--replicas=-1")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("kubectl scale --replicas=-1 succeeded:\n%s", out)
	}
	// The printer columns the issue names.
	header := strings.Fields(strings.SplitN(kubectl("get", "pxp"), "\n", 2)[0])
	if diff := cmp.Diff([]string{"NAME", "DESIRED", "READY", "AVAILABLE", "UP-TO-DATE", "AGE"}, header); diff != "" {
		t.Errorf("kubectl get pxp columns (-want +got):\n%s", diff)
	}
	if out := kubectl("get", "crawl"); !strings.Contains(out, "proxypool.crawl.proxyfleet.io/eu") {
		t.Errorf("kubectl get crawl does not list the pool:\n%s", out)
	}
}

func poolObject(t *testing.T, name, specYAML string) *unstructured.Unstructured {
	t.Helper()
	spec := map[string]any{}
	if err := yaml.Unmarshal([]byte(specYAML), &spec); err != nil {
		t.Fatalf("bad test spec %q: %v", specYAML, err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": crawlv1alpha1.SchemeGroupVersion.String(),
		"kind":       "ProxyPool",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// TestProxyPoolRecycleDefaults: spec.recycle with a limit is accepted and
// its window defaults to an hour.
func TestProxyPoolRecycleDefaults(t *testing.T) {
	env := apiServer.Get(t)
	client := dynamic.NewForConfigOrDie(env.Config).Resource(poolsGVR).Namespace(newNamespace(t))
	created, err := client.Create(context.Background(), poolObject(t, "recycling", `{template: {spec: {provider: local}}, recycle: {maxLeases: 500}}`),
		metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		t.Fatal(err)
	}
	var pool crawlv1alpha1.ProxyPool
	data, _ := created.MarshalJSON()
	if err := yaml.Unmarshal(data, &pool); err != nil {
		t.Fatal(err)
	}
	maxLeases := int64(500)
	want := &crawlv1alpha1.PoolRecycle{MaxLeases: &maxLeases, Window: &metav1.Duration{Duration: 60 * 60e9}}
	if diff := cmp.Diff(want, pool.Spec.Recycle); diff != "" {
		t.Errorf("spec.recycle (-want +got):\n%s", diff)
	}
}
