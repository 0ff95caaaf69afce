package kubelet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

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
