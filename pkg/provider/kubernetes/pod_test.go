package kubernetes

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

const (
	testNS       = "crawl"
	testUID      = types.UID("0123abcd-4567-89ef-0123-456789abcdef")
	testInstance = "px-0123abcd456789ef"
	testHash     = "sha256:feed"
	testImage    = "registry.test/forward-proxy:v1"
)

// --- fixtures: a Proxy and the request the controller makes for it ---

type proxyOption func(*crawlv1alpha1.Proxy)

func testProxy(name string, opts ...proxyOption) *crawlv1alpha1.Proxy {
	p := &crawlv1alpha1.Proxy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: testUID},
		Spec:       crawlv1alpha1.ProxySpec{Mode: crawlv1alpha1.ModeManaged, Provider: crawlv1alpha1.ProviderKubernetes},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withKubernetes(k crawlv1alpha1.KubernetesProvider) proxyOption {
	return func(p *crawlv1alpha1.Proxy) { p.Spec.Kubernetes = &k }
}

func withAuth(secret string) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Auth = &crawlv1alpha1.ProxyAuth{SecretRef: crawlv1alpha1.LocalSecretRef{Name: secret}}
	}
}

func request(p *crawlv1alpha1.Proxy, cloudInit []byte) provider.CreateRequest {
	return provider.CreateRequest{Name: testInstance, Proxy: p, Tags: provider.Tags(p), CloudInit: cloudInit, SpecHash: testHash}
}

// --- expected objects: the default Pod, changed by small options ---

type podOption func(*corev1.Pod)

func wantPod(proxyName string, opts ...podOption) *corev1.Pod {
	healthz := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("proxy"), Scheme: corev1.URISchemeHTTP}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      testInstance,
			Namespace: testNS,
			Labels: map[string]string{
				crawlv1alpha1.TagManagedBy:      crawlv1alpha1.ManagedByValue,
				crawlv1alpha1.TagProxyUID:       string(testUID),
				crawlv1alpha1.TagProxyNamespace: testNS,
				crawlv1alpha1.TagProxyName:      proxyName,
			},
			Annotations: map[string]string{crawlv1alpha1.SpecHashAnnotation: testHash},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "crawl.proxyfleet.io/v1alpha1", Kind: "Proxy", Name: proxyName, UID: testUID, Controller: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "proxy",
				Image: DefaultImage,
				Args:  []string{"--listen=:3128", "--name=" + testInstance},
				Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 3128, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: healthz, PeriodSeconds: 5, TimeoutSeconds: 2, FailureThreshold: 2},
				LivenessProbe:  &corev1.Probe{ProbeHandler: healthz, PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 6},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			RestartPolicy:                corev1.RestartPolicyAlways,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				RunAsGroup:     ptr.To[int64](65532),
				FSGroup:        ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
	// A Managed Proxy without spec.auth runs with the controller's
	// generated credentials; podAuthEnv overrides this for spec.auth.
	podAuthEnv(proxyaccess.GeneratedCredentialsSecret(&crawlv1alpha1.Proxy{ObjectMeta: metav1.ObjectMeta{UID: testUID}}))(pod)
	for _, o := range opts {
		o(pod)
	}
	return pod
}

func podImage(image string) podOption {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Image = image }
}

func podPort(port int32) podOption {
	return func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Ports[0].ContainerPort = port
		c.Args[0] = "--listen=:" + strconv.Itoa(int(port))
	}
}

func podResources(r corev1.ResourceRequirements) podOption {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Resources = r }
}

func podCloudInit() podOption {
	return func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Args = append(c.Args, "--cloud-init=/etc/forward-proxy/cloud-init/user-data")
		c.VolumeMounts = []corev1.VolumeMount{{Name: "cloud-init", MountPath: "/etc/forward-proxy/cloud-init", ReadOnly: true}}
		p.Spec.Volumes = []corev1.Volume{{Name: "cloud-init", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: testInstance + "-cloud-init", DefaultMode: ptr.To[int32](0o400),
		}}}}
	}
}

func podAuthEnv(secret string) podOption {
	return func(p *corev1.Pod) {
		ref := func(key string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}
		}
		leaseKeys := ref("lease-key")
		leaseKeys.SecretKeyRef.Optional = ptr.To(true) // a spec.auth Secret may hold none
		p.Spec.Containers[0].Env = []corev1.EnvVar{
			{Name: "PROXY_USERNAME", ValueFrom: ref("username")},
			{Name: "PROXY_PASSWORD", ValueFrom: ref("password")},
			{Name: "PROXY_LEASE_KEYS", ValueFrom: leaseKeys},
		}
	}
}

func podLabel(key, value string) podOption {
	return func(p *corev1.Pod) { p.Labels[key] = value }
}

func podAnnotation(key, value string) podOption {
	return func(p *corev1.Pod) { p.Annotations[key] = value }
}

func podPlacement(nodeSelector map[string]string, tolerations []corev1.Toleration) podOption {
	return func(p *corev1.Pod) { p.Spec.NodeSelector, p.Spec.Tolerations = nodeSelector, tolerations }
}

func wantSecret(proxyName, content string, opts ...func(*corev1.Secret)) *corev1.Secret {
	pod := wantPod(proxyName)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            testInstance + "-cloud-init",
			Namespace:       testNS,
			Labels:          pod.Labels,
			OwnerReferences: pod.OwnerReferences,
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"user-data": []byte(content)},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// longName is a valid Proxy name of the maximum length, 253.
var longName = strings.Repeat("a", 62) + "." + strings.Repeat("b", 62) + "." + strings.Repeat("c", 62) + "." + strings.Repeat("d", 64)

func TestBuildPod(t *testing.T) {
	customResources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	tolerations := []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "crawl", Effect: corev1.TaintEffectNoSchedule}}
	longLabel := labelValue(longName)

	tests := map[string]struct {
		proxy      *crawlv1alpha1.Proxy
		cloudInit  []byte
		opts       Options
		wantPod    *corev1.Pod
		wantSecret *corev1.Secret
	}{
		"defaults": {
			proxy:   testProxy("p1"),
			wantPod: wantPod("p1"),
		},
		"an empty kubernetes block takes the defaults": {
			proxy:   testProxy("p1", withKubernetes(crawlv1alpha1.KubernetesProvider{})),
			wantPod: wantPod("p1"),
		},
		"the operator's default image": {
			proxy:   testProxy("p1"),
			opts:    Options{DefaultImage: testImage},
			wantPod: wantPod("p1", podImage(testImage)),
		},
		"custom image, port and resources": {
			proxy: testProxy("p1", withKubernetes(crawlv1alpha1.KubernetesProvider{
				Image: "example.test/proxy:2", Port: 8080, Resources: &customResources,
			})),
			opts:    Options{DefaultImage: testImage},
			wantPod: wantPod("p1", podImage("example.test/proxy:2"), podPort(8080), podResources(customResources)),
		},
		"node selector and tolerations": {
			proxy: testProxy("p1", withKubernetes(crawlv1alpha1.KubernetesProvider{
				NodeSelector: map[string]string{"pool": "egress"}, Tolerations: tolerations,
			})),
			wantPod: wantPod("p1", podPlacement(map[string]string{"pool": "egress"}, tolerations)),
		},
		"cloud-init: a Secret of its own, mounted read-only, named in the args": {
			proxy:      testProxy("p1"),
			cloudInit:  []byte("#cloud-config\nruncmd: [true]\n"),
			wantPod:    wantPod("p1", podCloudInit()),
			wantSecret: wantSecret("p1", "#cloud-config\nruncmd: [true]\n"),
		},
		"empty cloud-init is still delivered": {
			proxy:      testProxy("p1"),
			cloudInit:  []byte{},
			wantPod:    wantPod("p1", podCloudInit()),
			wantSecret: wantSecret("p1", ""),
		},
		"egress ranges become forward-proxy flags, in spec order": {
			proxy: testProxy("p1", func(p *crawlv1alpha1.Proxy) {
				p.Spec.Egress = &crawlv1alpha1.ProxyEgress{AllowCIDRs: []crawlv1alpha1.CIDR{"10.20.0.0/16", "fd00:1::/64"}, DenyCIDRs: []crawlv1alpha1.CIDR{"10.20.3.0/24"}}
			}),
			wantPod: wantPod("p1", func(p *corev1.Pod) {
				c := &p.Spec.Containers[0]
				c.Args = append(c.Args[:2:2], "--allow-cidr=10.20.0.0/16", "--allow-cidr=fd00:1::/64", "--deny-cidr=10.20.3.0/24")
			}),
		},
		"auth: credentials by reference, never copied": {
			proxy:   testProxy("p1", withAuth("proxy-creds")),
			wantPod: wantPod("p1", podAuthEnv("proxy-creds")),
		},
		"a 253-character name: a valid label, the full name in an annotation": {
			proxy:     testProxy(longName),
			cloudInit: []byte("x"),
			wantPod: wantPod(longName, podCloudInit(),
				podLabel(crawlv1alpha1.TagProxyName, longLabel),
				podAnnotation(crawlv1alpha1.TagProxyName, longName)),
			wantSecret: wantSecret(longName, "x", func(s *corev1.Secret) {
				s.Labels[crawlv1alpha1.TagProxyName] = longLabel
				s.Annotations = map[string]string{crawlv1alpha1.TagProxyName: longName}
			}),
		},
		"everything at once keeps the restricted security context": {
			proxy: testProxy("p1", withAuth("creds"), withKubernetes(crawlv1alpha1.KubernetesProvider{
				Image: "example.test/proxy:2", Port: 8080, Resources: &customResources,
				NodeSelector: map[string]string{"pool": "egress"}, Tolerations: tolerations,
			})),
			cloudInit: []byte("x"),
			wantPod: wantPod("p1", podImage("example.test/proxy:2"), podPort(8080), podResources(customResources),
				podPlacement(map[string]string{"pool": "egress"}, tolerations), podAuthEnv("creds"), podCloudInit()),
			wantSecret: wantSecret("p1", "x"),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod, secret := buildPod(request(tc.proxy, tc.cloudInit), tc.opts.withDefaults())
			if diff := cmp.Diff(tc.wantPod, pod); diff != "" {
				t.Errorf("Pod (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSecret, secret); diff != "" {
				t.Errorf("Secret (-want +got):\n%s", diff)
			}
			for k, v := range pod.Labels {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("label %s=%q is invalid: %v", k, v, errs)
				}
			}
		})
	}
}

// TestBuildPodDoesNotAlias: the Pod shares no maps or slices with the
// Proxy, so a caller may change either.
func TestBuildPodDoesNotAlias(t *testing.T) {
	res := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	p := testProxy("p1", withKubernetes(crawlv1alpha1.KubernetesProvider{
		Resources:    &res,
		NodeSelector: map[string]string{"pool": "egress"},
		Tolerations:  []corev1.Toleration{{Key: "k"}},
	}))
	before := p.DeepCopy()
	pod, _ := buildPod(request(p, nil), Options{}.withDefaults())
	pod.Spec.NodeSelector["pool"] = "changed"
	pod.Spec.Tolerations[0].Key = "changed"
	pod.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("9")
	if diff := cmp.Diff(before, p); diff != "" {
		t.Errorf("changing the Pod changed the Proxy (-before +after):\n%s", diff)
	}
}

func TestLabelValue(t *testing.T) {
	tests := map[string]struct {
		in   string
		want string // "" means: a shortened value, checked for validity only
	}{
		"short name kept":         {in: "p1", want: "p1"},
		"63 characters kept":      {in: strings.Repeat("a", 63), want: strings.Repeat("a", 63)},
		"empty kept":              {in: "", want: ""},
		"64 characters shortened": {in: strings.Repeat("a", 64)},
		"253 characters":          {in: longName},
		"dots at the cut":         {in: strings.Repeat("a", 51) + "....." + strings.Repeat("b", 30)},
		"invalid characters":      {in: "a b/c"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := labelValue(tc.in)
			if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
				t.Fatalf("labelValue(%q) = %q, invalid: %v", tc.in, got, errs)
			}
			if tc.want != "" && got != tc.want {
				t.Errorf("labelValue(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if tc.want == "" && tc.in != "" && got == tc.in {
				t.Errorf("labelValue(%q) kept an invalid value", tc.in)
			}
		})
	}
	// Two long names that share the first 63 characters get different labels.
	a, b := strings.Repeat("x", 70)+"a", strings.Repeat("x", 70)+"b"
	if labelValue(a) == labelValue(b) {
		t.Errorf("%q and %q map to the same label %q", a, b, labelValue(a))
	}
}

func TestPodInstance(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	tags := provider.Tags(testProxy("p1"))
	pod := func(opts ...podOption) *corev1.Pod {
		p := wantPod("p1")
		for _, o := range opts {
			o(p)
		}
		return p
	}
	phase := func(ph corev1.PodPhase) podOption {
		return func(p *corev1.Pod) { p.Status.Phase = ph }
	}
	readyCond := func(s corev1.ConditionStatus) podOption {
		return func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: s})
		}
	}
	podIP := func(ip string) podOption {
		return func(p *corev1.Pod) { p.Status.PodIP = ip }
	}
	container := func(state corev1.ContainerState) podOption {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "proxy", State: state}}
		}
	}
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = &now }
	instance := func(state provider.State, msg string) provider.Instance {
		return provider.Instance{ID: testNS + "/" + testInstance, State: state, Tags: tags, Message: msg, SpecHash: "sha256:feed"}
	}

	tests := map[string]struct {
		pod  *corev1.Pod
		want provider.Instance
	}{
		"just created": {pod: pod(), want: instance(provider.StateProvisioning, "pod Pending")},
		"pending":      {pod: pod(phase(corev1.PodPending)), want: instance(provider.StateProvisioning, "pod Pending")},
		"unschedulable": {
			pod: pod(phase(corev1.PodPending), func(p *corev1.Pod) {
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available"}}
			}),
			want: instance(provider.StateProvisioning, "Unschedulable: 0/3 nodes are available"),
		},
		"image pull back-off": {
			pod:  pod(phase(corev1.PodPending), container(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}})),
			want: instance(provider.StateProvisioning, "ImagePullBackOff: Back-off pulling image"),
		},
		"running and ready": {
			pod: pod(phase(corev1.PodRunning), readyCond(corev1.ConditionTrue), podIP("10.1.2.3")),
			want: func() provider.Instance {
				i := instance(provider.StateRunning, "running")
				i.IP, i.Port = "10.1.2.3", 3128
				return i
			}(),
		},
		"running and ready on a custom port": {
			pod: pod(podPort(8080), phase(corev1.PodRunning), readyCond(corev1.ConditionTrue), podIP("10.1.2.3")),
			want: func() provider.Instance {
				i := instance(provider.StateRunning, "running")
				i.IP, i.Port = "10.1.2.3", 8080
				return i
			}(),
		},
		"running, not ready": {
			pod:  pod(phase(corev1.PodRunning), readyCond(corev1.ConditionFalse), podIP("10.1.2.3")),
			want: instance(provider.StateProvisioning, "running, not ready"),
		},
		"running, no ready condition yet": {
			pod:  pod(phase(corev1.PodRunning), podIP("10.1.2.3")),
			want: instance(provider.StateProvisioning, "running, not ready"),
		},
		"failed: the container's termination": {
			pod:  pod(phase(corev1.PodFailed), container(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 2, Message: "last log lines, never shown"}})),
			want: instance(provider.StateStopped, "Error (exit code 2)"),
		},
		"failed: evicted": {
			pod: pod(phase(corev1.PodFailed), func(p *corev1.Pod) {
				p.Status.Reason, p.Status.Message = "Evicted", "The node was low on resource: memory."
			}),
			want: instance(provider.StateStopped, "Evicted: The node was low on resource: memory."),
		},
		"succeeded": {
			pod:  pod(phase(corev1.PodSucceeded), container(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}})),
			want: instance(provider.StateStopped, "Completed (exit code 0)"),
		},
		"being deleted while running": {
			pod:  pod(phase(corev1.PodRunning), readyCond(corev1.ConditionTrue), podIP("10.1.2.3"), deleting),
			want: instance(provider.StateStopped, "deleting"),
		},
		"tags: the full name from the annotation": {
			pod: wantPod(longName, podLabel(crawlv1alpha1.TagProxyName, labelValue(longName)), podAnnotation(crawlv1alpha1.TagProxyName, longName)),
			want: func() provider.Instance {
				i := instance(provider.StateProvisioning, "pod Pending")
				i.Tags = provider.Tags(testProxy(longName))
				return i
			}(),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, podInstance(tc.pod)); diff != "" {
				t.Errorf("podInstance (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSplitID(t *testing.T) {
	tests := map[string]struct {
		id        string
		ns, name  string
		wantValid bool
	}{
		"namespace/name": {id: "crawl/px-1", ns: "crawl", name: "px-1", wantValid: true},
		"no slash":       {id: "px-1"},
		"empty name":     {id: "crawl/"},
		"empty ns":       {id: "/px-1"},
		"two slashes":    {id: "a/b/c"},
		"empty":          {id: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ns, n, ok := splitID(tc.id)
			if ok != tc.wantValid || ns != tc.ns || n != tc.name {
				t.Errorf("splitID(%q) = %q, %q, %v; want %q, %q, %v", tc.id, ns, n, ok, tc.ns, tc.name, tc.wantValid)
			}
		})
	}
}
