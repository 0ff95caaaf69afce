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
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
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

// waiting is why a container cannot start yet, as a kubelet reports it.
type waiting struct{ reason, message string }

func (w *waiting) Error() string { return w.reason + ": " + w.message }

// start runs the Pod's first container as a forward proxy on a fresh address.
func (k *Kubelet) start(ctx context.Context, pod *corev1.Pod) (*runningPod, error) {
	if len(pod.Spec.Containers) == 0 {
		return nil, &waiting{reasonCrashLoop, "the Pod has no container"}
	}
	c := pod.Spec.Containers[0]
	env, err := k.resolveEnv(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	files, err := k.mountSecrets(ctx, pod, c)
	if err != nil {
		return nil, err
	}
	a, err := parseArgs(c.Args)
	if err != nil {
		return nil, &waiting{reasonCrashLoop, "forward-proxy: " + err.Error()}
	}
	if a.cloudInit != "" {
		if _, ok := files[a.cloudInit]; !ok {
			return nil, &waiting{reasonCrashLoop, "forward-proxy: cannot read cloud-init user-data " + a.cloudInit}
		}
	}
	user, pass := env[envUsername], env[envPassword]
	if a.authFile != "" {
		data, ok := files[a.authFile]
		if !ok {
			return nil, &waiting{reasonCrashLoop, "forward-proxy: cannot read --auth-file " + a.authFile}
		}
		user, pass, _ = strings.Cut(strings.TrimRight(string(data), "\r\n"), ":")
	}
	key := cache.MetaObjectToName(pod).String()
	a.config.Username, a.config.Password = user, pass
	a.config.Logger = klog.FromContext(ctx).WithName("forward-proxy").WithValues("pod", key)
	srv, err := forwardproxy.New(a.config)
	if err != nil {
		return nil, &waiting{reasonCrashLoop, err.Error()}
	}

	k.mu.Lock()
	defer k.mu.Unlock()
	ip, ln, err := k.listen(a.port)
	if err != nil {
		return nil, &waiting{reasonContainerCreating, err.Error()}
	}
	r := &runningPod{
		Pod: Pod{
			Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			Addr: ln.Addr().String(), Args: slices.Clone(c.Args), Files: files,
		},
		ip:      ip,
		started: metav1.Now(),
		server:  srv,
		served:  make(chan error, 1),
	}
	go func() { r.served <- srv.Serve(ln) }()
	k.running[key] = r
	k.ips[ip] = true
	klog.FromContext(ctx).V(2).Info("Started proxy", "pod", klog.KObj(pod), "addr", r.Addr, "auth", user != "")
	return r, nil
}

// listen finds the next 127.0.0.x (x from 2 to 254, round robin) not held
// by another Pod here whose port is free, and listens there. Round robin, as
// CNI IPAM (host-local) allocates: a replaced Pod rarely gets its
// predecessor's address, so nothing about the old Pod carries over to the
// new one by accident. Callers hold k.mu.
func (k *Kubelet) listen(port int) (string, net.Listener, error) {
	const first, count = 2, 253
	for i := range count {
		x := first + (k.nextHost-first+i)%count
		ip := "127.0.0." + strconv.Itoa(x)
		if k.ips[ip] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if errors.Is(err, syscall.EADDRINUSE) {
			continue // another process (or test) has this address and port
		}
		if err != nil {
			return "", nil, err
		}
		k.nextHost = x + 1
		return ip, ln, nil
	}
	return "", nil, fmt.Errorf("no free address 127.0.0.x for port %d", port)
}

// resolveEnv returns the container's environment, reading secretKeyRefs from
// the API like the kubelet.
func (k *Kubelet) resolveEnv(ctx context.Context, pod *corev1.Pod, c corev1.Container) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			optional := ptr.Deref(ref.Optional, false)
			secret, err := k.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				if optional {
					continue
				}
				return nil, &waiting{reasonConfigError, fmt.Sprintf("secret %q not found", ref.Name)}
			}
			if err != nil {
				return nil, err
			}
			v, ok := secret.Data[ref.Key]
			if !ok {
				if optional {
					continue
				}
				return nil, &waiting{reasonConfigError, fmt.Sprintf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)}
			}
			env[e.Name] = string(v)
		}
	}
	return env, nil
}

// mountSecrets returns the files of the container's Secret volumes by path.
func (k *Kubelet) mountSecrets(ctx context.Context, pod *corev1.Pod, c corev1.Container) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Spec.Volumes[i].Secret == nil {
			continue
		}
		src := pod.Spec.Volumes[i].Secret
		secret, err := k.client.CoreV1().Secrets(pod.Namespace).Get(ctx, src.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if ptr.Deref(src.Optional, false) {
				continue
			}
			return nil, &waiting{reasonContainerCreating, fmt.Sprintf("MountVolume.SetUp failed for volume %q: secret %q not found", m.Name, src.SecretName)}
		}
		if err != nil {
			return nil, err
		}
		dir := strings.TrimSuffix(m.MountPath, "/")
		if len(src.Items) == 0 {
			for key, v := range secret.Data {
				files[dir+"/"+key] = v
			}
			continue
		}
		for _, item := range src.Items {
			v, ok := secret.Data[item.Key]
			if !ok {
				return nil, &waiting{reasonContainerCreating, fmt.Sprintf("MountVolume.SetUp failed for volume %q: secret %q has no key %q", m.Name, src.SecretName, item.Key)}
			}
			files[dir+"/"+item.Path] = v
		}
	}
	return files, nil
}

// LoopbackCIDR is admitted by every proxy this kubelet runs, beside the
// container's own --allow-cidr ranges (forward-proxy refuses it by default).
var LoopbackCIDR = netip.MustParsePrefix("127.0.0.0/8")

func cidrFlag(dst *[]netip.Prefix) func(string) error {
	return func(v string) error {
		p, err := forwardproxy.ParseCIDR(v)
		if err != nil {
			return err
		}
		*dst = append(*dst, p)
		return nil
	}
}

// proxyArgs is what cmd/forward-proxy makes of its arguments.
type proxyArgs struct {
	config    forwardproxy.Config
	port      int
	cloudInit string
	authFile  string
}

// parseArgs reads cmd/forward-proxy's flags; an unknown flag fails, as it
// would fail the binary.
func parseArgs(args []string) (proxyArgs, error) {
	var a proxyArgs
	fs := flag.NewFlagSet("forward-proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", ":3128", "")
	fs.StringVar(&a.config.Name, "name", forwardproxy.DefaultName, "")
	fs.IntVar(&a.config.MaxConns, "max-conns", 1024, "")
	fs.DurationVar(&a.config.ReadHeaderTimeout, "read-header-timeout", forwardproxy.DefaultReadHeaderTimeout, "")
	fs.DurationVar(&a.config.IdleTimeout, "idle-timeout", forwardproxy.DefaultIdleTimeout, "")
	fs.DurationVar(&a.config.DialTimeout, "dial-timeout", forwardproxy.DefaultDialTimeout, "")
	fs.BoolVar(&a.config.XForwardedFor, "x-forwarded-for", false, "")
	fs.StringVar(&a.authFile, "auth-file", "", "")
	fs.StringVar(&a.cloudInit, "cloud-init", "", "")
	fs.Duration("shutdown-timeout", 25*time.Second, "")
	fs.Func("allow-cidr", "", cidrFlag(&a.config.AllowCIDRs))
	fs.Func("deny-cidr", "", cidrFlag(&a.config.DenyCIDRs))
	// klog's flags, which the binary registers too.
	fs.Int("v", 0, "")
	fs.String("vmodule", "", "")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	if fs.NArg() > 0 {
		return a, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	// Pods here run on loopback and so do the targets of every test: the
	// stand-in cluster network is admitted explicitly, as a real cluster's
	// would have to be by spec.egress.allowCIDRs.
	a.config.AllowCIDRs = append(a.config.AllowCIDRs, LoopbackCIDR)
	_, portText, err := net.SplitHostPort(*listen)
	if err != nil {
		return a, fmt.Errorf("--listen: %w", err)
	}
	a.port, err = strconv.Atoi(portText)
	if err != nil || a.port <= 0 || a.port > 65535 {
		return a, fmt.Errorf("--listen: a Pod needs a fixed port, not %q", portText)
	}
	return a, nil
}

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

// stop shuts the proxy of key down, then forgets it and frees its address:
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
