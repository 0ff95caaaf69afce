package kubelet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// probeReadiness runs the container's readiness probe once against the Pod
// address; no probe means ready, as for the kubelet.
func (k *Kubelet) probeReadiness(ctx context.Context, pod *corev1.Pod, r *runningPod) bool {
	c := pod.Spec.Containers[0]
	probe := c.ReadinessProbe
	if probe == nil {
		return true
	}
	switch {
	case probe.HTTPGet != nil:
		port, ok := resolvePort(probe.HTTPGet.Port, c)
		if !ok {
			return false
		}
		scheme := strings.ToLower(string(probe.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		url := scheme + "://" + net.JoinHostPort(r.ip, strconv.Itoa(port)) + probe.HTTPGet.Path
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Readiness probe failed", "pod", klog.KObj(pod), "err", err)
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case probe.TCPSocket != nil:
		port, ok := resolvePort(probe.TCPSocket.Port, c)
		if !ok {
			return false
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(r.ip, strconv.Itoa(port)), 2*time.Second)
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	default:
		return true // exec and gRPC probes are beyond this helper
	}
}

func resolvePort(p intstr.IntOrString, c corev1.Container) (int, bool) {
	if p.Type == intstr.Int {
		return p.IntValue(), true
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), true
		}
	}
	return 0, false
}

// reportsReady: the Pod's status already says it is running and ready at ip.
func reportsReady(pod *corev1.Pod, ip string) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP != ip {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (k *Kubelet) writeRunning(ctx context.Context, pod *corev1.Pod, r *runningPod, ready bool) error {
	pod = pod.DeepCopy()
	c := pod.Spec.Containers[0]
	st := &pod.Status
	st.Phase = corev1.PodRunning
	st.Reason, st.Message = "", ""
	st.HostIP, st.HostIPs = HostIP, []corev1.HostIP{{IP: HostIP}}
	st.PodIP, st.PodIPs = r.ip, []corev1.PodIP{{IP: r.ip}}
	st.StartTime = &r.started
	readyStatus, notReadyReason := corev1.ConditionTrue, ""
	if !ready {
		readyStatus, notReadyReason = corev1.ConditionFalse, "ContainersNotReady"
	}
	setCondition(st, corev1.PodScheduled, corev1.ConditionTrue, "")
	setCondition(st, corev1.PodInitialized, corev1.ConditionTrue, "")
	setCondition(st, corev1.ContainersReady, readyStatus, notReadyReason)
	setCondition(st, corev1.PodReady, readyStatus, notReadyReason)
	st.ContainerStatuses = []corev1.ContainerStatus{{
		Name:        c.Name,
		Image:       c.Image,
		ImageID:     c.Image,
		ContainerID: "testenv://" + string(pod.UID),
		Ready:       ready,
		Started:     ptr.To(true),
		State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: r.started}},
	}}
	if _, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing Running status: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Pod running", "pod", klog.KObj(pod), "ip", r.ip, "ready", ready)
	return nil
}

// writeWaiting reports a container that cannot start, once per reason.
func (k *Kubelet) writeWaiting(ctx context.Context, pod *corev1.Pod, w *waiting) error {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason == w.reason && cs.State.Waiting.Message == w.message {
			return nil
		}
	}
	pod = pod.DeepCopy()
	c := pod.Spec.Containers[0]
	st := &pod.Status
	st.Phase = corev1.PodPending
	st.HostIP, st.HostIPs = HostIP, []corev1.HostIP{{IP: HostIP}}
	setCondition(st, corev1.PodScheduled, corev1.ConditionTrue, "")
	setCondition(st, corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady")
	setCondition(st, corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady")
	st.ContainerStatuses = []corev1.ContainerStatus{{
		Name:  c.Name,
		Image: c.Image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: w.reason, Message: w.message}},
	}}
	if _, err := k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing waiting status: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Container waiting", "pod", klog.KObj(pod), "reason", w.reason, "message", w.message)
	return nil
}

func setCondition(st *corev1.PodStatus, t corev1.PodConditionType, status corev1.ConditionStatus, reason string) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = metav1.Now()
		}
		c.Status, c.Reason = status, reason
		return
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: metav1.Now()})
}
