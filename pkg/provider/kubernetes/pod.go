package kubernetes

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
)

// The shape of every proxy Pod.
const (
	// ContainerName is the proxy container's name.
	ContainerName = "proxy"
	// PortName names the proxy's container port; the probes refer to it.
	PortName = "proxy"
	// DefaultPort is the proxy port when spec.kubernetes.port is unset (the
	// CRD defaults it too; this covers objects built in Go).
	DefaultPort int32 = 3128
	// HealthPath is forward-proxy's own health endpoint, served without auth.
	HealthPath = "/healthz"

	// CloudInitKey is the key of the cloud-init Secret, and the file name
	// it is mounted under.
	CloudInitKey = "user-data"
	// CloudInitDir is where the cloud-init Secret is mounted in the container.
	CloudInitDir = "/etc/forward-proxy/cloud-init"
	// CloudInitPath is the file forward-proxy reads with --cloud-init.
	CloudInitPath = CloudInitDir + "/" + CloudInitKey
	// cloudInitVolume names the Secret volume.
	cloudInitVolume = "cloud-init"

	// EnvUsername and EnvPassword carry the basic-auth credentials into
	// cmd/forward-proxy (it never takes them as flags).
	EnvUsername = "PROXY_USERNAME"
	EnvPassword = "PROXY_PASSWORD"
	// EnvLeaseKeys carries the instance's lease keys (the Secret's
	// lease-key, when it has one): the proxy then checks lease credentials
	// (docs/decisions/0400-a-lease-is-a-key.md).
	EnvLeaseKeys = "PROXY_LEASE_KEYS"

	// NonRootUID is the user (and group) the proxy runs as: distroless's
	// "nonroot", which the forward-proxy image declares.
	NonRootUID int64 = 65532

	// maxLabelValue is the longest label value the API server accepts.
	maxLabelValue = validation.LabelValueMaxLength
)

// cloudInitFileMode: readable by the owner only. The Pod's fsGroup makes
// the kubelet add group read (0440, group NonRootUID), so the non-root proxy
// can read it and no other user can.
const cloudInitFileMode int32 = 0o400

// DefaultResources are the proxy container's resources when
// spec.kubernetes.resources is unset: a forward proxy idles at a few MiB and
// a few millicores. No CPU limit, so bursts of tunnels are not throttled;
// a memory limit, so a leak cannot take the node down.
func DefaultResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("50m"),
			corev1.ResourceMemory: resource.MustParse("32Mi"),
		},
		Limits: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		},
	}
}

// CloudInitSecretName is the name of the Secret holding an instance's cloud-init.
func CloudInitSecretName(instance string) string { return instance + "-cloud-init" }

// podID is the Instance ID of a Pod: "namespace/name".
func podID(namespace, name string) string { return namespace + "/" + name }

// splitID parses an Instance ID; ok is false for anything that cannot name a Pod.
func splitID(id string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(id, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", false
	}
	return namespace, name, true
}

// buildPod returns the Pod of an instance and, when the request carries
// cloud-init, the Secret that delivers it. Pure: everything comes from req
// and opts (with defaults applied).
func buildPod(req provider.CreateRequest, opts Options) (*corev1.Pod, *corev1.Secret) {
	p := req.Proxy
	spec := p.Spec.Kubernetes
	if spec == nil {
		spec = &crawlv1alpha1.KubernetesProvider{}
	}
	labels, fullValues := tagLabels(req.Tags)
	annotations := map[string]string{crawlv1alpha1.SpecHashAnnotation: req.SpecHash}
	maps.Copy(annotations, fullValues)

	port := cmp.Or(spec.Port, DefaultPort)
	args := []string{"--listen=:" + strconv.Itoa(int(port)), "--name=" + req.Name}
	args = append(args, provider.EgressArgs(p)...)
	secret := cloudInitSecret(req, labels, fullValues)
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	if secret != nil {
		args = append(args, "--cloud-init="+CloudInitPath)
		volumes, mounts = cloudInitVolumes(secret.Name)
	}
	container := proxyContainer(cmp.Or(spec.Image, opts.DefaultImage), port, args, spec.Resources)
	container.Env = credentialsEnv(p)
	container.VolumeMounts = mounts

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            req.Name,
			Namespace:       p.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{ownerRef(p)},
		},
		Spec: corev1.PodSpec{
			Containers:                   []corev1.Container{container},
			Volumes:                      volumes,
			RestartPolicy:                corev1.RestartPolicyAlways,
			AutomountServiceAccountToken: ptr.To(false),
			// Service links would put every Service of the namespace into
			// the proxy's environment; it needs none.
			EnableServiceLinks: ptr.To(false),
			NodeSelector:       maps.Clone(spec.NodeSelector),
			Tolerations:        cloneTolerations(spec.Tolerations),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To(NonRootUID),
				RunAsGroup:     ptr.To(NonRootUID),
				FSGroup:        ptr.To(NonRootUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
	return pod, secret
}

// cloudInitSecret is the Secret that delivers the request's cloud-init to
// its Pod, labelled like the Pod; nil when there is none.
func cloudInitSecret(req provider.CreateRequest, labels, fullValues map[string]string) *corev1.Secret {
	if req.CloudInit == nil {
		return nil
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            CloudInitSecretName(req.Name),
			Namespace:       req.Proxy.Namespace,
			Labels:          maps.Clone(labels),
			Annotations:     maps.Clone(fullValues),
			OwnerReferences: []metav1.OwnerReference{ownerRef(req.Proxy)},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{CloudInitKey: req.CloudInit},
	}
}

// cloudInitVolumes mount the cloud-init Secret read-only at CloudInitDir.
func cloudInitVolumes(secretName string) ([]corev1.Volume, []corev1.VolumeMount) {
	volumes := []corev1.Volume{{
		Name: cloudInitVolume,
		VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  secretName,
			DefaultMode: ptr.To(cloudInitFileMode),
		}},
	}}
	mounts := []corev1.VolumeMount{{Name: cloudInitVolume, MountPath: CloudInitDir, ReadOnly: true}}
	return volumes, mounts
}

// credentialsEnv hands the proxy its username and password from spec.auth's
// Secret, or the one the controller generated: a proxy is never open; and
// the Secret's lease keys, when it holds any (optional: a spec.auth Secret
// without them makes a proxy whose leases are advisory).
func credentialsEnv(p *crawlv1alpha1.Proxy) []corev1.EnvVar {
	secret := proxyaccess.CredentialsSecret(p)
	if secret == "" {
		return nil
	}
	leaseKeys := secretEnv(EnvLeaseKeys, secret, leasecred.SecretKey)
	leaseKeys.ValueFrom.SecretKeyRef.Optional = ptr.To(true)
	return []corev1.EnvVar{
		secretEnv(EnvUsername, secret, crawlv1alpha1.AuthUsernameKey),
		secretEnv(EnvPassword, secret, crawlv1alpha1.AuthPasswordKey),
		leaseKeys,
	}
}

// proxyContainer is the forward-proxy container: its port, probes on
// /healthz, resources (DefaultResources unless given) and a restricted
// security context.
func proxyContainer(image string, port int32, args []string, resources *corev1.ResourceRequirements) corev1.Container {
	healthz := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path:   HealthPath,
		Port:   intstr.FromString(PortName),
		Scheme: corev1.URISchemeHTTP,
	}}
	c := corev1.Container{
		Name:      ContainerName,
		Image:     image,
		Args:      args,
		Ports:     []corev1.ContainerPort{{Name: PortName, ContainerPort: port, Protocol: corev1.ProtocolTCP}},
		Resources: DefaultResources(),
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     healthz,
			PeriodSeconds:    5,
			TimeoutSeconds:   2,
			FailureThreshold: 2,
		},
		LivenessProbe: &corev1.Probe{
			ProbeHandler:     healthz,
			PeriodSeconds:    10,
			TimeoutSeconds:   5,
			FailureThreshold: 6,
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	if resources != nil {
		c.Resources = *resources.DeepCopy()
	}
	return c
}

func secretEnv(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret},
		Key:                  key,
	}}}
}

func cloneTolerations(in []corev1.Toleration) []corev1.Toleration {
	if in == nil {
		return nil
	}
	out := make([]corev1.Toleration, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}

// ownerRef makes the Proxy the controller of its Pod and Secret. The
// operator deletes both itself (the finalizer waits for it); the reference
// lets the cluster's garbage collector remove what a crash left behind once
// the Proxy is gone. No blockOwnerDeletion: that would need update rights on
// proxies/finalizers and would hold the Proxy's foreground deletion.
func ownerRef(p *crawlv1alpha1.Proxy) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: crawlv1alpha1.SchemeGroupVersion.String(),
		Kind:       "Proxy",
		Name:       p.Name,
		UID:        p.UID,
		Controller: ptr.To(true),
	}
}

// tagLabels turns instance tags into labels. A tag value that is not a valid
// label value (a Proxy name can be 253 characters, a label value 63) gets a
// shortened label value and its full value in fullValues, to be stored as an
// annotation under the same key.
func tagLabels(tags map[string]string) (labels, fullValues map[string]string) {
	labels = make(map[string]string, len(tags))
	for k, v := range tags {
		lv := labelValue(v)
		labels[k] = lv
		if lv != v {
			if fullValues == nil {
				fullValues = map[string]string{}
			}
			fullValues[k] = v
		}
	}
	return labels, fullValues
}

// labelValue returns v when it is a valid label value, otherwise a valid one
// derived from it: a readable prefix and a hash of the whole, so that two
// long values sharing a prefix still select different Pods.
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	suffix := hex.EncodeToString(sum[:])[:10]
	// Keep the characters a label value allows; it must start and end with
	// an alphanumeric, which the hex suffix guarantees at the end.
	prefix := strings.Map(func(r rune) rune {
		if r < 0x80 && (r == '-' || r == '_' || r == '.' || isAlnum(byte(r))) {
			return r
		}
		return '-'
	}, v)
	prefix = prefix[:min(len(prefix), maxLabelValue-len(suffix)-1)]
	prefix = strings.TrimLeft(strings.TrimRight(prefix, "-_."), "-_.")
	if prefix == "" {
		return suffix
	}
	return prefix + "-" + suffix
}

func isAlnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// podTags recovers the tags of a Pod: its labels, with the full values of
// shortened ones from the annotations.
func podTags(pod *corev1.Pod) map[string]string {
	tags := maps.Clone(pod.Labels)
	for k := range tags {
		if full, ok := pod.Annotations[k]; ok && labelValue(full) == tags[k] {
			tags[k] = full
		}
	}
	return tags
}

// podInstance maps a Pod to the provider's view of it. Pure.
func podInstance(pod *corev1.Pod) provider.Instance {
	inst := provider.Instance{ID: podID(pod.Namespace, pod.Name), Tags: podTags(pod), SpecHash: pod.Annotations[crawlv1alpha1.SpecHashAnnotation]}
	switch {
	case pod.DeletionTimestamp != nil:
		inst.State, inst.Message = provider.StateStopped, "deleting"
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		inst.State, inst.Message = provider.StateStopped, stoppedMessage(pod)
	case pod.Status.Phase == corev1.PodRunning && podReady(pod) && pod.Status.PodIP != "":
		inst.State, inst.Message = provider.StateRunning, "running"
		inst.IP, inst.Port = pod.Status.PodIP, proxyPort(pod)
	default:
		inst.State, inst.Message = provider.StateProvisioning, startingMessage(pod)
	}
	return inst
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// proxyPort is the proxy container's port as the Pod declares it.
func proxyPort(pod *corev1.Pod) int32 {
	for _, c := range pod.Spec.Containers {
		if c.Name != ContainerName {
			continue
		}
		for _, p := range c.Ports {
			if p.Name == PortName {
				return p.ContainerPort
			}
		}
		if len(c.Ports) > 0 {
			return c.Ports[0].ContainerPort
		}
	}
	return DefaultPort
}

// startingMessage says what a Pod that is not serving yet waits for, in the
// kubelet's and scheduler's own words (image pulls, unschedulable, missing
// Secrets name objects, never their content).
func startingMessage(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return joinReason(w.Reason, w.Message)
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return joinReason(c.Reason, c.Message)
		}
	}
	if pod.Status.Phase == corev1.PodRunning {
		return "running, not ready"
	}
	if pod.Status.Phase == "" {
		return "pod " + string(corev1.PodPending)
	}
	return "pod " + string(pod.Status.Phase)
}

// stoppedMessage says why a Pod ended: the Pod's reason (Evicted, ...), or
// the proxy container's termination.
func stoppedMessage(pod *corev1.Pod) string {
	if pod.Status.Reason != "" {
		return joinReason(pod.Status.Reason, pod.Status.Message)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != ContainerName {
			continue
		}
		if t := cs.State.Terminated; t != nil {
			reason := t.Reason
			if reason == "" {
				reason = "Terminated"
			}
			return fmt.Sprintf("%s (exit code %d)", reason, t.ExitCode)
		}
	}
	return "pod " + string(pod.Status.Phase)
}

func joinReason(reason, message string) string {
	switch {
	case reason == "":
		return message
	case message == "":
		return reason
	default:
		return reason + ": " + message
	}
}
