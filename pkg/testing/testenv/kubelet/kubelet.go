// Package kubelet plays the kubelet for proxy Pods on a testenv API server,
// which has none (nor a scheduler): it watches Pods matching a label
// selector, binds each new one to its node name, runs its container as a
// real in-process forward proxy (pkg/forwardproxy) on a loopback address of
// its own, runs the readiness probe until it first succeeds, and writes the
// Pod's status as a kubelet would (Running, podIP, Ready). When a Pod is deleted it stops the
// proxy and finishes the deletion (grace period 0), the kubelet's last step.
//
// It reads the container the way cmd/forward-proxy would: the port and name
// come from --listen and --name, the egress guard's ranges from --allow-cidr
// and --deny-cidr (plus 127.0.0.0/8, where every Pod and test target lives), credentials from PROXY_USERNAME and
// PROXY_PASSWORD (resolved from the referenced Secret, so auth behaves like
// the real Pod), and --cloud-init must name a file mounted from a Secret
// volume. What the real kubelet would refuse to start, it refuses the same
// way: a missing Secret for an env var is CreateContainerConfigError, a
// missing Secret volume leaves the Pod ContainerCreating, bad flags are
// CrashLoopBackOff; each is retried with backoff.
//
// Every Pod gets its own address 127.0.0.x (x from 2 up, round robin, skipping
// addresses whose port another process holds), so each proxy has a distinct
// IP, as Pods do. The API server
// accepts loopback addresses in status.podIP: pod status validation checks
// only that podIP is an IP and matches podIPs[0] (unlike Endpoints, which
// refuse loopback).
//
// It is a test helper, not a kubelet: one container per Pod, no images, no
// restarts, no periodic probes, no resource accounting, no node object.
package kubelet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
)

// DefaultNodeName is the node Pods are bound to when Options.NodeName is empty.
const DefaultNodeName = "testenv-kubelet"

// HostIP is the node address written into status.hostIP.
const HostIP = "127.0.0.1"

// The environment variables cmd/forward-proxy reads its credentials from.
const (
	envUsername = "PROXY_USERNAME"
	envPassword = "PROXY_PASSWORD"
)

// Waiting reasons, as the real kubelet writes them.
const (
	reasonContainerCreating = "ContainerCreating"
	reasonConfigError       = "CreateContainerConfigError"
	reasonCrashLoop         = "CrashLoopBackOff"
)

// stopTimeout bounds a proxy's graceful shutdown before it is closed.
const stopTimeout = 2 * time.Second

// Options selects the Pods to run.
type Options struct {
	// Namespace limits the Pods watched; empty watches all namespaces.
	Namespace string
	// LabelSelector selects the Pods to run, such as
	// "crawl.proxyfleet.io/managed-by=proxy-operator"; empty selects all.
	LabelSelector string
	// NodeName is the node this kubelet binds Pods to and runs. Pods bound
	// to another node are left alone. Default DefaultNodeName.
	NodeName string
}

// Pod is what the kubelet runs for one Pod.
type Pod struct {
	Namespace, Name string
	UID             types.UID
	// Addr is where the proxy listens: podIP:port.
	Addr string
	// Args are the container's arguments.
	Args []string
	// Files are the Secret volume files by their path in the container.
	// They hold secrets: tests compare them, never print them.
	Files map[string][]byte
}

// Kubelet runs proxy Pods in-process. Its methods are safe for concurrent use.
type Kubelet struct {
	client   kubernetes.Interface
	opts     Options
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	running map[string]*runningPod // by namespace/name
	ips     map[string]bool        // addresses held by running Pods
	// nextHost is where the search for a free 127.0.0.x starts.
	nextHost int
}

type runningPod struct {
	Pod
	ip      string
	started metav1.Time
	server  *forwardproxy.Server
	served  chan error // Serve's result
}

// Start runs a kubelet until ctx ends or the test finishes, whichever is
// first; it returns once its Pod cache has synced. Everything it started is
// stopped before the test's cleanup returns.
func Start(ctx context.Context, t testing.TB, client kubernetes.Interface, opts Options) *Kubelet {
	t.Helper()
	if opts.NodeName == "" {
		opts.NodeName = DefaultNodeName
	}
	ctx, cancel := context.WithCancel(ctx)
	logger := klog.FromContext(ctx).WithName("kubelet")
	ctx = klog.NewContext(ctx, logger)

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = opts.LabelSelector }))
	k := &Kubelet{
		client:   client,
		opts:     opts,
		informer: factory.Core().V1().Pods().Informer(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "testenv-kubelet"}),
		running:  map[string]*runningPod{},
		ips:      map[string]bool{},
		nextHost: 2,
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := k.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		cancel()
		t.Fatalf("kubelet: adding the Pod handler: %v", err)
	}

	factory.Start(ctx.Done())
	workerDone := make(chan struct{})
	go func() {
		defer close(workerDone)
		defer k.stopAll(ctx)
		for k.processNextItem(ctx) {
		}
	}()
	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	t.Cleanup(func() {
		cancel()
		<-workerDone
		factory.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), k.informer.HasSynced) {
		t.Fatal("kubelet: the Pod cache did not sync")
	}
	return k
}

// Pods returns the Pods running now, ordered by namespace/name.
func (k *Kubelet) Pods() []Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]Pod, 0, len(k.running))
	for _, r := range k.running {
		out = append(out, r.Pod)
	}
	slices.SortFunc(out, func(a, b Pod) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return out
}

// Pod returns the running Pod namespace/name, if any.
func (k *Kubelet) Pod(namespace, name string) (Pod, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.running[namespace+"/"+name]
	if !ok {
		return Pod{}, false
	}
	return r.Pod, true
}

func (k *Kubelet) processNextItem(ctx context.Context) bool {
	key, shutdown := k.queue.Get()
	if shutdown {
		return false
	}
	defer k.queue.Done(key)
	if err := k.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Retrying Pod", "pod", key, "err", err)
			k.queue.AddRateLimited(key)
		}
		return true
	}
	k.queue.Forget(key)
	return true
}

// sync moves one Pod a step toward what a kubelet would make of it.
func (k *Kubelet) sync(ctx context.Context, key string) error {
	obj, exists, err := k.informer.GetStore().GetByKey(key)
	if err != nil {
		return err
	}
	k.mu.Lock()
	running := k.running[key]
	k.mu.Unlock()
	if !exists {
		if running != nil {
			k.stop(ctx, key)
		}
		return nil
	}
	pod := obj.(*corev1.Pod)
	if running != nil && running.UID != pod.UID {
		// A new Pod of the same name: the old one's deletion was missed.
		k.stop(ctx, key)
		running = nil
	}
	switch {
	case pod.DeletionTimestamp != nil:
		return k.finishDeletion(ctx, pod)
	case pod.Spec.NodeName == "":
		return k.bind(ctx, pod)
	case pod.Spec.NodeName != k.opts.NodeName,
		pod.Status.Phase == corev1.PodSucceeded, pod.Status.Phase == corev1.PodFailed:
		return nil
	}
	if running == nil {
		running, err = k.start(ctx, pod)
		var w *waiting
		if errors.As(err, &w) {
			if werr := k.writeWaiting(ctx, pod, w); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
	if reportsReady(pod, running.ip) {
		return nil
	}
	ready := k.probeReadiness(ctx, pod, running)
	if err := k.writeRunning(ctx, pod, running, ready); err != nil {
		return err
	}
	if !ready {
		return errors.New("readiness probe failed")
	}
	return nil
}

// bind plays the scheduler: the Pod goes to this kubelet's node. The update
// event brings the Pod back.
func (k *Kubelet) bind(ctx context.Context, pod *corev1.Pod) error {
	err := k.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: k.opts.NodeName},
	}, metav1.CreateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // bound elsewhere, being deleted, or gone: the next event says which
	}
	if err != nil {
		return fmt.Errorf("binding Pod: %w", err)
	}
	klog.FromContext(ctx).V(3).Info("Bound Pod", "pod", klog.KObj(pod), "node", k.opts.NodeName)
	return nil
}

// finishDeletion stops the proxy and removes the Pod for good, as the
// kubelet does once the containers have stopped.
func (k *Kubelet) finishDeletion(ctx context.Context, pod *corev1.Pod) error {
	k.stop(ctx, cache.MetaObjectToName(pod).String())
	err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or a new Pod of that name
	}
	if err != nil {
		return fmt.Errorf("finishing the deletion: %w", err)
	}
	klog.FromContext(ctx).V(3).Info("Pod deleted", "pod", klog.KObj(pod))
	return nil
}

// a Pod that Pods no longer lists has stopped serving.
func (k *Kubelet) stop(ctx context.Context, key string) {
	k.mu.Lock()
	r, ok := k.running[key]
	k.mu.Unlock()
	if !ok {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	_ = r.server.Shutdown(sctx) // past the timeout it has closed what was left
	<-r.served
	k.mu.Lock()
	delete(k.running, key)
	delete(k.ips, r.ip)
	k.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Stopped proxy", "pod", key, "addr", r.Addr)
}

func (k *Kubelet) stopAll(ctx context.Context) {
	k.mu.Lock()
	keys := make([]string, 0, len(k.running))
	for key := range k.running {
		keys = append(keys, key)
	}
	k.mu.Unlock()
	for _, key := range keys {
		k.stop(ctx, key)
	}
}
