package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/generated/clientset/versioned"
	"github.com/proxyfleet/proxy-operator/pkg/metrics"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// TestInvalidAutoscalingIsRejected: each spec.autoscaling rule, sent to the
// real API server, is refused with the field named.
func TestInvalidAutoscalingIsRejected(t *testing.T) {
	env := apiServer.Get(t)
	const tmpl = `template: {spec: {provider: local}}, `
	for name, tc := range map[string]struct {
		spec, wantField, wantMessage string
	}{
		"no maxReplicas":            {spec: `{` + tmpl + `autoscaling: {minReplicas: 1}}`, wantField: "spec.autoscaling.maxReplicas"},
		"maxReplicas zero":          {spec: `{` + tmpl + `autoscaling: {maxReplicas: 0}}`, wantField: "spec.autoscaling.maxReplicas"},
		"min above max":             {spec: `{` + tmpl + `autoscaling: {minReplicas: 5, maxReplicas: 4}}`, wantField: "spec.autoscaling.minReplicas", wantMessage: "must not exceed spec.autoscaling.maxReplicas"},
		"min negative":              {spec: `{` + tmpl + `autoscaling: {minReplicas: -1, maxReplicas: 4}}`, wantField: "spec.autoscaling.minReplicas"},
		"target zero":               {spec: `{` + tmpl + `autoscaling: {maxReplicas: 4, targetUtilization: 0}}`, wantField: "spec.autoscaling.targetUtilization"},
		"target above 100":          {spec: `{` + tmpl + `autoscaling: {maxReplicas: 4, targetUtilization: 120}}`, wantField: "spec.autoscaling.targetUtilization"},
		"delay not a duration":      {spec: `{` + tmpl + `autoscaling: {maxReplicas: 4, scaleDownDelay: soon}}`, wantField: "spec.autoscaling.scaleDownDelay"},
		"delay above a day":         {spec: `{` + tmpl + `autoscaling: {maxReplicas: 4, scaleDownDelay: 25h}}`, wantField: "spec.autoscaling.scaleDownDelay"},
		"scale-up step zero":        {spec: `{` + tmpl + `autoscaling: {maxReplicas: 4, scaleUp: {maxStep: 0}}}`, wantField: "spec.autoscaling.scaleUp.maxStep"},
		"scale-up percent <0":       {spec: `{` + tmpl + `autoscaling: {maxReplicas: 4, scaleUp: {percent: -5}}}`, wantField: "spec.autoscaling.scaleUp.percent"},
		"scale-up period too short": {spec: `{` + tmpl + `autoscaling: {maxReplicas: 4, scaleUp: {period: 100ms}}}`, wantField: "spec.autoscaling.scaleUp.period"},
		"unknown field":             {spec: `{` + tmpl + `autoscaling: {maxReplicas: 4, cooldown: 5m}}`, wantField: "spec.autoscaling.cooldown"},
	} {
		t.Run(name, func(t *testing.T) {
			client := dynamic.NewForConfigOrDie(env.Config).Resource(poolsGVR).Namespace(newNamespace(t))
			_, err := client.Create(context.Background(), poolObject(t, dnsName(name), tc.spec), metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
			if err == nil {
				t.Fatalf("created; want rejection naming %s", tc.wantField)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("error %v is not Invalid or BadRequest", err)
			}
			if !strings.Contains(err.Error(), tc.wantField) || !strings.Contains(err.Error(), tc.wantMessage) {
				t.Errorf("error does not name %s (%q):\n%v", tc.wantField, tc.wantMessage, err)
			}
		})
	}
}

// TestAutoscalingDefaults: the minimal block gets the documented defaults.
func TestAutoscalingDefaults(t *testing.T) {
	env := apiServer.Get(t)
	crawl := versioned.NewForConfigOrDie(env.Config)
	p := &crawlv1alpha1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Name: "auto"}, Spec: crawlv1alpha1.ProxyPoolSpec{
		Template:    crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{Provider: crawlv1alpha1.ProviderLocal}},
		Autoscaling: &crawlv1alpha1.PoolAutoscaling{MaxReplicas: 4},
	}}
	created, err := crawl.CrawlV1alpha1().ProxyPools(newNamespace(t)).Create(context.Background(), p, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		t.Fatal(err)
	}
	want := &crawlv1alpha1.PoolAutoscaling{
		MinReplicas: ptr.To[int32](0), MaxReplicas: 4, TargetUtilization: ptr.To[int32](80),
		ScaleDownDelay: &metav1.Duration{Duration: 5 * time.Minute},
		ScaleUp:        crawlv1alpha1.PoolScaleUp{MaxStep: ptr.To[int32](4), Percent: ptr.To[int32](100), Period: &metav1.Duration{Duration: 15 * time.Second}},
	}
	if diff := cmp.Diff(want, created.Spec.Autoscaling); diff != "" {
		t.Errorf("autoscaling defaults (-want +got):\n%s", diff)
	}
}

var metricName = regexp.MustCompile(`proxy_operator_[a-z_]+`)

// TestAutoscalingExamples: examples/autoscaling/ holds a ProxyPool without
// spec.autoscaling, a KEDA ScaledObject and an HPA on an External metric
// that both target it and scale on metrics the operator exports. The pool
// and the HPA (an API every cluster serves) are created on the real API
// server; KEDA's CRD is not installed here, so the ScaledObject is parsed
// and checked field by field.
func TestAutoscalingExamples(t *testing.T) {
	env := apiServer.Get(t)
	ctx := context.Background()
	ns := newNamespace(t)
	dir := filepath.Join(testenv.RepoRoot(t), "examples", "autoscaling")
	read := func(name string) []byte {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	exported := map[string]bool{}
	for _, n := range metrics.New(metrics.Labels{}).Names() {
		exported[n] = true
	}
	checkQuery := func(where, q string) {
		t.Helper()
		names := metricName.FindAllString(q, -1)
		if len(names) == 0 {
			t.Errorf("%s names no operator metric: %q", where, q)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s names %s, which the operator does not export", where, n)
			}
		}
	}

	var pool crawlv1alpha1.ProxyPool
	if err := yaml.UnmarshalStrict(read("pool.yaml"), &pool); err != nil {
		t.Fatal(err)
	}
	if pool.Spec.Autoscaling != nil {
		t.Errorf("the pool an HPA or KEDA scales must not set spec.autoscaling (two writers of spec.replicas)")
	}
	if _, err := versioned.NewForConfigOrDie(env.Config).CrawlV1alpha1().ProxyPools(ns).Create(ctx, &pool, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		t.Fatalf("creating the example pool: %v", err)
	}
	target := func(where, apiVersion, kind, name string) {
		t.Helper()
		if apiVersion != crawlv1alpha1.SchemeGroupVersion.String() || kind != "ProxyPool" || name != pool.Name {
			t.Errorf("%s targets %s %s %q, want %s ProxyPool %q", where, apiVersion, kind, name, crawlv1alpha1.SchemeGroupVersion, pool.Name)
		}
	}

	var hpa autoscalingv2.HorizontalPodAutoscaler
	if err := yaml.UnmarshalStrict(read("hpa-external.yaml"), &hpa); err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(env.Config).AutoscalingV2().HorizontalPodAutoscalers(ns).Create(ctx, &hpa, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		t.Errorf("creating the example HPA: %v", err)
	}
	ref := hpa.Spec.ScaleTargetRef
	target("the HPA", ref.APIVersion, ref.Kind, ref.Name)
	if len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].External == nil {
		t.Fatalf("the HPA should scale on one External metric: %+v", hpa.Spec.Metrics)
	}
	checkQuery("the HPA's metric", hpa.Spec.Metrics[0].External.Metric.Name)

	var keda struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			ScaleTargetRef struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Name       string `json:"name"`
			} `json:"scaleTargetRef"`
			MinReplicaCount *int `json:"minReplicaCount"`
			MaxReplicaCount int  `json:"maxReplicaCount"`
			PollingInterval int  `json:"pollingInterval"`
			CooldownPeriod  int  `json:"cooldownPeriod"`
			Triggers        []struct {
				Type     string            `json:"type"`
				Metadata map[string]string `json:"metadata"`
			} `json:"triggers"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(read("keda-scaledobject.yaml"), &keda); err != nil {
		t.Fatal(err)
	}
	if keda.APIVersion != "keda.sh/v1alpha1" || keda.Kind != "ScaledObject" {
		t.Errorf("the KEDA example is %s %s, want keda.sh/v1alpha1 ScaledObject", keda.APIVersion, keda.Kind)
	}
	r := keda.Spec.ScaleTargetRef
	target("the ScaledObject", r.APIVersion, r.Kind, r.Name)
	if len(keda.Spec.Triggers) != 1 || keda.Spec.Triggers[0].Type != "prometheus" {
		t.Fatalf("the ScaledObject should have one prometheus trigger: %+v", keda.Spec.Triggers)
	}
	md := keda.Spec.Triggers[0].Metadata
	for _, k := range []string{"serverAddress", "query", "threshold"} {
		if md[k] == "" {
			t.Errorf("the prometheus trigger lacks %s", k)
		}
	}
	checkQuery("the ScaledObject's query", md["query"])
	if !strings.Contains(md["query"], `pool="`+pool.Name+`"`) || !strings.Contains(md["query"], `namespace=`) {
		t.Errorf("the ScaledObject's query %q does not select the pool by namespace and name", md["query"])
	}
}
