package pool

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// TestCacheBehindOurScaleWrite: after a scale write at resourceVersion 120,
// a cached pool at 119 is behind (its sync waits), one at 120 or later is
// not, and once caught up the memory is dropped.
func TestCacheBehindOurScaleWrite(t *testing.T) {
	key := cache.NewObjectName("ns", "p")
	for name, tc := range map[string]struct {
		written string
		reads   []string
		want    []bool
	}{
		"nothing written":             {reads: []string{"5"}, want: []bool{false}},
		"older cache, then caught":    {written: "120", reads: []string{"119", "120", "119"}, want: []bool{true, false, false}},
		"newer cache (another write)": {written: "120", reads: []string{"130"}, want: []bool{false}},
		"unreadable versions":         {written: "120", reads: []string{"x"}, want: []bool{false}},
		"our write unreadable":        {written: "y", reads: []string{"1"}, want: []bool{false}},
	} {
		t.Run(name, func(t *testing.T) {
			var a autoscaler
			if tc.written != "" {
				a.wrote(key, tc.written)
			}
			var got []bool
			for _, rv := range tc.reads {
				got = append(got, a.behind(key, rv))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("behind (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAutoscalePolicyOf(t *testing.T) {
	pool := func(a crawlv1alpha1.PoolAutoscaling, maxLeases int32) *crawlv1alpha1.ProxyPool {
		return &crawlv1alpha1.ProxyPool{Spec: crawlv1alpha1.ProxyPoolSpec{Autoscaling: &a,
			Template: crawlv1alpha1.ProxyTemplate{Spec: crawlv1alpha1.ProxySpec{MaxLeases: maxLeases}}}}
	}
	for name, tc := range map[string]struct {
		pool *crawlv1alpha1.ProxyPool
		want AutoscalePolicy
	}{
		"defaults (a Go client that left them unset)": {
			pool: pool(crawlv1alpha1.PoolAutoscaling{MaxReplicas: 4}, 0),
			want: AutoscalePolicy{Min: 0, Max: 4, TargetPercent: 80, SlotsPerMember: 1, ScaleDownDelay: 5 * time.Minute,
				ScaleUpMaxStep: 4, ScaleUpPercent: 100, ScaleUpPeriod: 15 * time.Second},
		},
		"everything set": {
			pool: pool(crawlv1alpha1.PoolAutoscaling{MinReplicas: ptr.To[int32](2), MaxReplicas: 9, TargetUtilization: ptr.To[int32](50),
				ScaleDownDelay: &metav1.Duration{Duration: time.Minute},
				ScaleUp:        crawlv1alpha1.PoolScaleUp{MaxStep: ptr.To[int32](1), Percent: ptr.To[int32](0), Period: &metav1.Duration{Duration: time.Second}}}, 3),
			want: AutoscalePolicy{Min: 2, Max: 9, TargetPercent: 50, SlotsPerMember: 3, ScaleDownDelay: time.Minute,
				ScaleUpMaxStep: 1, ScaleUpPercent: 0, ScaleUpPeriod: time.Second},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, autoscalePolicyOf(tc.pool)); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
		})
	}
}
