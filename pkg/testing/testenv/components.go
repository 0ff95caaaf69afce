package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// addrInUse is what etcd and kube-apiserver log when a port chosen by freePorts was
// taken before they bound it.
const addrInUse = "address already in use"

// readyRequestTimeout bounds one health or readiness request.
const readyRequestTimeout = 2 * time.Second

// serviceAccountIssuer is also the default audience of ServiceAccount tokens.
const serviceAccountIssuer = "https://kubernetes.default.svc"

// startEtcd starts etcd on fresh ports, retrying once if a port was taken meanwhile.
func (e *Environment) startEtcd(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		ports, err := e.ports(2)
		if err != nil {
			return err
		}
		e.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
		e.etcdPeer = "http://127.0.0.1:" + strconv.Itoa(ports[1])
		err = e.runEtcd(ctx)
		if err == nil || attempt > 1 || e.etcd == nil || !e.etcd.tail.contains(addrInUse) {
			return err
		}
		klog.FromContext(ctx).V(1).Info("etcd port taken, retrying on other ports", "err", err)
		if err := e.etcd.stop(); err != nil {
			return err
		}
		e.etcd = nil
	}
}

func (e *Environment) runEtcd(ctx context.Context) error {
	args := []string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls=" + e.etcdURL,
		"--advertise-client-urls=" + e.etcdURL,
		"--listen-peer-urls=" + e.etcdPeer,
		// The initial-* flags only matter for a new data dir; a kept Dir restarts
		// its single member on whatever peer port is free now.
		"--initial-advertise-peer-urls=" + e.etcdPeer,
		"--initial-cluster=testenv=" + e.etcdPeer,
	}
	if !e.keepDir {
		// The data is thrown away anyway; fsync only slows tests down.
		args = append(args, "--unsafe-no-fsync")
	}
	out, err := e.logOutput("etcd", false)
	if err != nil {
		return err
	}
	if e.etcd, err = startProcess("etcd", filepath.Join(e.binDir, "etcd"), args, out); err != nil {
		return err
	}
	health := e.etcdURL + "/health"
	err = e.waitReady(ctx, e.etcd, etcdStartTimeout, http.DefaultClient, health, func(body string) bool {
		return strings.Contains(body, `"health":"true"`)
	})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("etcd ready", "url", e.etcdURL, "pid", e.etcd.pid())
	return nil
}

// startAPIServer starts kube-apiserver on a fresh port, retrying once if the port
// was taken meanwhile, and sets e.Config.
func (e *Environment) startAPIServer(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		ports, err := e.ports(1)
		if err != nil {
			return err
		}
		e.apiPort = ports[0]
		e.Config = e.adminConfig()
		err = e.runAPIServer(ctx)
		if err == nil || attempt > 1 || e.apiserver == nil || !e.apiserver.tail.contains(addrInUse) {
			return err
		}
		klog.FromContext(ctx).V(1).Info("kube-apiserver port taken, retrying on another port", "err", err)
		if err := e.apiserver.stop(); err != nil {
			return err
		}
		e.apiserver = nil
	}
}

// runAPIServer starts kube-apiserver on e.apiPort and waits for /readyz. After the
// first start it appends to the log, so a restart's log follows the first one's.
func (e *Environment) runAPIServer(ctx context.Context) error {
	pki := filepath.Join(e.Dir, "pki")
	args := []string{
		"--etcd-servers=" + e.etcdURL,
		"--secure-port=" + strconv.Itoa(e.apiPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// Unused while the serving cert is given, but keeps the API server from
		// writing into the working dir should that change.
		"--cert-dir=" + filepath.Join(e.Dir, "apiserver-certs"),
		"--tls-cert-file=" + filepath.Join(pki, serverCertFile),
		"--tls-private-key-file=" + filepath.Join(pki, serverKeyFile),
		"--client-ca-file=" + filepath.Join(pki, caCertFile),
		"--authorization-mode=RBAC",
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + filepath.Join(pki, saPublicKeyFile),
		"--service-account-signing-key-file=" + filepath.Join(pki, saPrivateKeyFile),
		"--api-audiences=" + serviceAccountIssuer,
		// Only configuration: there is no kube-proxy and nothing routes to it.
		"--service-cluster-ip-range=10.0.0.0/24",
		// Without a controller-manager no ServiceAccount gets a token Secret, and
		// the plugin would reject Pods that name one.
		"--disable-admission-plugins=ServiceAccount",
		// The endpoint reconciler would keep trying to publish 127.0.0.1, which
		// Endpoints validation rejects.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
	}
	out, err := e.logOutput("kube-apiserver", e.startedAPIServer)
	if err != nil {
		return err
	}
	if e.apiserver, err = startProcess("kube-apiserver", filepath.Join(e.binDir, "kube-apiserver"), args, out); err != nil {
		return err
	}
	e.startedAPIServer = true
	client, err := rest.HTTPClientFor(e.Config)
	if err != nil {
		return fmt.Errorf("kube-apiserver client: %w", err)
	}
	defer client.CloseIdleConnections()
	err = e.waitReady(ctx, e.apiserver, apiserverStartTimeout, client, e.Config.Host+"/readyz", func(body string) bool {
		return body == "ok"
	})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("kube-apiserver ready", "host", e.Config.Host, "pid", e.apiserver.pid())
	return nil
}

// waitReady polls url until ready accepts a 200 response's body. It fails early if
// p exits, and either way the error carries the tail of p's output.
func (e *Environment) waitReady(ctx context.Context, p *process, timeout time.Duration, client *http.Client, url string, ready func(body string) bool) error {
	err := poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		if exited, err := p.exited(); exited {
			if err == nil {
				err = errors.New("exited with status 0")
			}
			return true, fmt.Errorf("exited before it was ready: %w", err)
		}
		// Whoever holds a clashing port may accept and never answer: bound each
		// request, and give it up as soon as the child exits.
		reqCtx, cancel := context.WithTimeout(ctx, readyRequestTimeout)
		defer cancel()
		go func() {
			select {
			case <-p.done:
				cancel()
			case <-reqCtx.Done():
			}
		}()
		req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, url, nil)
		if err != nil {
			return true, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if err != nil {
			return false, err
		}
		if resp.StatusCode == http.StatusOK && ready(strings.TrimSpace(string(body))) {
			return true, nil
		}
		return false, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	})
	if err != nil {
		return p.failure(fmt.Errorf("not ready: %w", err))
	}
	return nil
}

// adminConfig authenticates with the admin client certificate on e.apiPort.
func (e *Environment) adminConfig() *rest.Config {
	return &rest.Config{
		Host: "https://127.0.0.1:" + strconv.Itoa(e.apiPort),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   e.pki.caCert,
			CertData: e.pki.adminCert,
			KeyData:  e.pki.adminKey,
		},
		// client-go's default of 5 requests/s makes tests slow for no benefit.
		QPS:   100,
		Burst: 200,
	}
}
