package aws_test

// Controller integration: the real controller against the real API server
// (pkg/testing/testenv), with the aws provider driving the real SDK against
// ec2test under the IAM policy of docs/aws.md. The fake's public IPs are
// loopback addresses where the tests run a real forward proxy, so "Ready"
// means a request went through it.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/controller"
	"github.com/proxyfleet/proxy-operator/pkg/gc"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/aws"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/controllertest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

type harness struct {
	*controllertest.Harness
	fake   *ec2test.Server
	aws    *aws.Provider
	target string
	port   int32
}

// startController runs the controller with the aws provider against a fake
// under the documented policy whose instances all get ip, where a real
// forward proxy listens.
func startController(t *testing.T, ip string, opts ...ec2test.Option) *harness {
	env := apiServer.Get(t)
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	fake := ec2test.New(t, append([]ec2test.Option{ec2test.WithPolicy(documentedPolicy(t)), ec2test.WithPublicIP(func(int) string { return ip })}, opts...)...)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	prov, err := aws.New(ctx, aws.Options{
		Region: region, ClusterID: clusterID, BaseEndpoint: fake.URL, ThrottleBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		Credentials: credentials.NewStaticCredentialsProvider(ec2test.AccessKeyID, ec2test.SecretAccessKey, ""),
		Secrets: func(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
			return kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	px := proxytest.StartInProcess(t, proxytest.Options{ListenIP: ip})
	return &harness{
		Harness: controllertest.Start(t, env.Config, controllertest.Options{
			NamespacePrefix: "aws-",
			Workers:         2,
			Providers:       map[crawlv1alpha1.ProviderName]provider.Provider{crawlv1alpha1.ProviderAWS: prov},
			Registry:        provider.Registry{aws.Registration()},
		}),
		fake: fake, aws: prov, target: proxytest.StartHTTPTarget(t).URL, port: int32(proxytest.Port(t, px.Addr)),
	}
}

// newCollector returns an orphan collector of the harness's aws provider
// with cfg's settings, its Proxy cache synced; the cache stops with the
// test.
func (h *harness) newCollector(t *testing.T, cfg gc.Config) *gc.Collector {
	t.Helper()
	return h.NewCollector(cfg, crawlv1alpha1.ProviderAWS, h.aws)
}

func (h *harness) awsProxy(name string) *crawlv1alpha1.Proxy {
	return &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: crawlv1alpha1.ProxySpec{
			Provider:  crawlv1alpha1.ProviderAWS,
			AWS:       &crawlv1alpha1.AWSProvider{Port: h.port, SubnetIDs: []string{"subnet-0a0a0a0a0a0a0a0a0", "subnet-0b0b0b0b0b0b0b0b0"}, SecurityGroupIDs: ec2test.DefaultSecurityGroups},
			CloudInit: &crawlv1alpha1.CloudInit{Inline: ptr.To("#cloud-config\npackages: [squid]\n")},
		},
	}
}

func TestControllerLaunchesInstanceThatBecomesReady(t *testing.T) {
	t.Parallel()
	const ip = "127.0.0.31"
	h := startController(t, ip, ec2test.WithInvisibleCalls(1))
	spec := h.awsProxy("p1")
	spec.Spec.AWS.Spot = &crawlv1alpha1.AWSSpot{}
	created := h.Create(spec)

	p := h.WaitProvisioned("p1")
	if !strings.HasPrefix(p.Status.ProviderID, "aws://"+region+"/i-") || p.Status.IP != ip || p.Status.Port != h.port {
		t.Errorf("status providerID %q at %s:%d, want aws://%s/i-… at %s:%d", p.Status.ProviderID, p.Status.IP, p.Status.Port, region, ip, h.port)
	}
	h.ProbeReady("p1", h.target)

	live := h.fake.Live()
	if len(live) != 1 {
		t.Fatalf("%d live instances, want 1", len(live))
	}
	in := live[0]
	if in.Tags[crawlv1alpha1.TagProxyUID] != string(created.UID) || in.Tags[crawlv1alpha1.TagProxyNamespace] != h.NS || !in.Spot {
		t.Errorf("instance %+v: want the Proxy's tags, Spot", in)
	}
	// No spec.auth: the user-data carries the generated credentials.
	secret, err := h.Kube.CoreV1().Secrets(h.NS).Get(context.Background(), proxyaccess.GeneratedCredentialsSecret(created), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the generated credentials Secret: %v", err)
	}
	if !strings.Contains(in.UserData, "PROXY_AUTH_PASSWORD='"+string(secret.Data["password"])+"'") {
		t.Errorf("the user-data does not carry the generated credentials of Secret %s", secret.Name)
	}
	if n := h.fake.Calls(ec2test.RunInstances); n != 1 {
		t.Errorf("%d RunInstances calls, want 1", n)
	}

	if err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Delete(context.Background(), "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Eventually(30*time.Second, "Proxy gone and its instance terminated", func() (bool, string) {
		_, err := h.Crawl.CrawlV1alpha1().Proxies(h.NS).Get(context.Background(), "p1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(h.fake.Live()) == 0, fmt.Sprintf("get: %v, live %+v", err, h.fake.Live())
	})
}

func TestControllerReplacesInstanceOnSpecChange(t *testing.T) {
	t.Parallel()
	h := startController(t, "127.0.0.32", ec2test.WithSteps(2))
	h.Create(h.awsProxy("p1"))
	h.WaitProvisioned("p1")
	h.ProbeReady("p1", h.target)

	h.Update("p1", func(p *crawlv1alpha1.Proxy) { p.Spec.AWS.InstanceTypes = []string{"t3a.micro"} })
	h.Eventually(30*time.Second, "replacement running", func() (bool, string) {
		p := h.Get("p1")
		live := h.fake.Live()
		return len(live) == 1 && live[0].InstanceType == "t3a.micro" && live[0].State == "running" &&
				meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("live %+v, conditions %+v", live, p.Status.Conditions)
	})
	h.ProbeReady("p1", h.target)
	if run, term := h.fake.Calls(ec2test.RunInstances), h.fake.Calls(ec2test.TerminateInstances); run != 2 || term < 1 {
		t.Errorf("%d launches and %d terminates, want 2 and at least 1", run, term)
	}
}

// A changed cloud-init Secret replaces the instance: the new one carries
// the new user-data, the old one is terminated.
func TestControllerReplacesInstanceOnSecretChange(t *testing.T) {
	t.Parallel()
	h := startController(t, "127.0.0.37")
	setUserData := func(doc string) { h.SetSecret("cloud-init", map[string]string{"user-data": doc}) }
	setUserData("#cloud-config\n# v1\n")
	spec := h.awsProxy("p1")
	spec.Spec.CloudInit = &crawlv1alpha1.CloudInit{SecretRef: &crawlv1alpha1.SecretKeyRef{Name: "cloud-init", Key: "user-data"}}
	h.Create(spec)
	first := h.WaitProvisioned("p1").Status.ProviderID
	h.ProbeReady("p1", h.target)

	setUserData("#cloud-config\n# v2\n")
	h.Eventually(30*time.Second, "a replacement from the new Secret", func() (bool, string) {
		p := h.Get("p1")
		live := slices.DeleteFunc(h.fake.Live(), func(in ec2test.Instance) bool { return in.State == "shutting-down" })
		return p.Status.ProviderID != first && len(live) == 1 && strings.HasSuffix(p.Status.ProviderID, live[0].ID) &&
				strings.Contains(live[0].UserData, "# v2") && meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("providerID %s, live %d, conditions %+v", p.Status.ProviderID, len(live), p.Status.Conditions)
	})
	h.ProbeReady("p1", h.target)
	if all := h.fake.Instances(); len(all) != 2 || !strings.Contains(all[0].UserData, "# v1") {
		t.Errorf("%d instances launched, want 2, the first from v1", len(all))
	}
}

// A Spot interruption: the notice drains the Proxy (no new leases, the live
// ones renew); then EC2 shuts the instance down behind the operator's back,
// and the operator replaces it from the same spec with a new client token
// and leases the Proxy again.
func TestControllerReplacesInterruptedSpotInstance(t *testing.T) {
	t.Parallel()
	h := startController(t, "127.0.0.33")
	spec := h.awsProxy("p1")
	spec.Spec.AWS.Spot = &crawlv1alpha1.AWSSpot{MaxPrice: "0.0040"}
	h.Create(spec)
	h.WaitProvisioned("p1")
	first := h.ProbeReady("p1", h.target).Status.ProviderID

	ec2ID := first[strings.LastIndex(first, "/")+1:]
	if err := h.fake.Interrupt(ec2ID); err != nil {
		t.Fatal(err)
	}
	h.Eventually(30*time.Second, "draining on the notice", func() (bool, string) {
		p := h.Get("p1")
		_, draining := p.Annotations[crawlv1alpha1.DrainingAnnotation]
		return draining && p.Annotations[crawlv1alpha1.DrainReasonAnnotation] == controller.ReasonInterrupted && p.Status.ProviderID == first,
			fmt.Sprintf("annotations %v, providerID %s", p.Annotations, p.Status.ProviderID)
	})
	if err := h.fake.SetState(ec2ID, "shutting-down", "Server.SpotInstanceTermination"); err != nil {
		t.Fatal(err)
	}
	h.Eventually(30*time.Second, "a replacement instance", func() (bool, string) {
		p := h.Get("p1")
		return p.Status.ProviderID != "" && p.Status.ProviderID != first &&
				meta.IsStatusConditionTrue(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned),
			fmt.Sprintf("providerID %s, conditions %+v", p.Status.ProviderID, p.Status.Conditions)
	})
	h.ProbeReady("p1", h.target)
	if live := h.fake.Live(); len(live) != 1 || live[0].ID == ec2ID {
		t.Errorf("live instances %+v, want only the replacement", live)
	}
	h.Eventually(30*time.Second, "leased again", func() (bool, string) {
		p := h.Get("p1")
		_, draining := p.Annotations[crawlv1alpha1.DrainingAnnotation]
		return !draining, fmt.Sprintf("annotations %v", p.Annotations)
	})
}

func TestControllerOutOfCapacityThenRecovers(t *testing.T) {
	t.Parallel()
	h := startController(t, "127.0.0.34")
	h.fake.SetNoCapacity("t3.micro", true)
	h.Create(h.awsProxy("p1"))

	h.Eventually(30*time.Second, "QuotaExceeded", func() (bool, string) {
		c := meta.FindStatusCondition(h.Get("p1").Status.Conditions, crawlv1alpha1.ConditionProvisioned)
		return c != nil && c.Reason == controller.ReasonQuotaExceeded && strings.Contains(c.Message, "InsufficientInstanceCapacity"), fmt.Sprintf("condition %+v", c)
	})
	h.fake.SetNoCapacity("t3.micro", false)
	h.WaitProvisioned("p1")
	h.ProbeReady("p1", h.target)
	if n := len(h.fake.Live()); n != 1 {
		t.Errorf("%d live instances, want 1", n)
	}
}

// TestGCCollectsOnlyItsClustersOrphans: an instance of this cluster whose
// Proxy is gone is terminated; the live Proxy's instance, another
// cluster's orphan and an instance that is not the operator's are not.
func TestGCCollectsOnlyItsClustersOrphans(t *testing.T) {
	t.Parallel()
	h := startController(t, "127.0.0.35", ec2test.WithPrincipal(otherClusterKey, documentedPolicyFor(t, "cluster-b")))
	live := h.Create(h.awsProxy("live"))
	h.WaitProvisioned("live")
	h.ProbeReady("live", h.target)
	ctx := context.Background()

	// An orphan left by a crash between the launch and the status write of
	// a Proxy deleted meanwhile (its credentials Secret outlives it).
	gone := testProxy(50)
	gone.Namespace = h.NS
	if _, err := h.Kube.CoreV1().Secrets(h.NS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: gone.Spec.Auth.SecretRef.Name, Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
		StringData: map[string]string{"username": "crawler", "password": "gone-password"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.aws.Create(ctx, request(gone, "h")); err != nil {
		t.Fatal(err)
	}
	other := newProvider(t, h.fake, asOtherCluster)
	otherOrphan := testProxy(51)
	otherOrphan.UID = uuid.NewUUID()
	if _, err := other.Create(ctx, request(otherOrphan, "h")); err != nil {
		t.Fatal(err)
	}

	collector := h.newCollector(t, gc.Config{Interval: time.Minute})
	if deleted, err := collector.CollectOnce(ctx); err != nil || deleted != 1 {
		t.Fatalf("CollectOnce = %d, %v; want 1 orphan deleted", deleted, err)
	}
	byUID := map[string]string{}
	for _, in := range h.fake.Live() {
		byUID[in.Tags[crawlv1alpha1.TagProxyUID]] = in.State
	}
	if _, ok := byUID[string(gone.UID)]; ok && byUID[string(gone.UID)] != "shutting-down" {
		t.Errorf("the orphan is %s, want shutting-down", byUID[string(gone.UID)])
	}
	// (The other cluster's instance is still pending: nobody of its
	// cluster describes it on.)
	if byUID[string(live.UID)] != "running" || !slices.Contains([]string{"pending", "running"}, byUID[string(otherOrphan.UID)]) {
		t.Errorf("instances by Proxy UID %v: the live Proxy's and the other cluster's must still run", byUID)
	}
}
