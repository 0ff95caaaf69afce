package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"text/template"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// addons is what the node runs through the API server beside its processes:
// the RBAC of kube-router (a process of the node, which reads Pods,
// namespaces and NetworkPolicies), and the cluster DNS, CoreDNS from make
// cluster-tools' pinned build, as a Deployment behind the kube-dns Service
// at the kubelet's clusterDNS address (docs/decisions/0281-coredns-deployment.md).
// Applied server-side, so a second up brings a running node's addons up to date.
var addons = template.Must(template.New("addons").Parse(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:kube-router"}
rules:
  - apiGroups: [""]
    resources: [pods, namespaces, nodes, services]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
  - apiGroups: [networking.k8s.io]
    resources: [networkpolicies]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kube-router"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:kube-router"}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
  - apiGroups: [""]
    resources: [services, pods, namespaces]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
# Cluster names only: the node has no upstream resolver it may rely on, and
# nothing the suite resolves is outside the cluster.
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health {
            lameduck 5s
        }
        ready
        kubernetes {{.Domain}} in-addr.arpa ip6.arpa {
            pods insecure
            ttl 30
        }
        cache 30
        reload
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 1
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
        # Port 53 without a capability (a safe sysctl, namespaced to the Pod).
        sysctls: [{name: net.ipv4.ip_unprivileged_port_start, value: "0"}]
      containers:
        - name: coredns
          image: ghcr.io/proxyfleet/coredns:{{.Version}}
          imagePullPolicy: Never
          args: ["-conf", "/etc/coredns/Corefile"]
          ports:
            - {name: dns, containerPort: 53, protocol: UDP}
            - {name: dns-tcp, containerPort: 53, protocol: TCP}
          readinessProbe:
            httpGet: {path: /ready, port: 8181}
            periodSeconds: 2
          livenessProbe:
            httpGet: {path: /health, port: 8080}
            periodSeconds: 10
          resources:
            requests: {cpu: 50m, memory: 32Mi}
            limits: {memory: 128Mi}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
          volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes:
        - name: config
          configMap: {name: coredns}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: {{.DNSIP}}
  selector: {k8s-app: kube-dns}
  ports:
    - {name: dns, port: 53, targetPort: 53, protocol: UDP}
    - {name: dns-tcp, port: 53, targetPort: 53, protocol: TCP}
`))

// addonsManifest renders the addons for n. Pure.
func (n node) addonsManifest() string {
	var b bytes.Buffer
	if err := addons.Execute(&b, map[string]string{
		"Version": n.Version, "DNSIP": n.dnsIP().String(), "Domain": clusterDomain,
	}); err != nil {
		panic(err) // a template bug, caught by the tests
	}
	return b.String()
}

// applyAddons applies the addons with kubectl as the node's admin.
func applyAddons(ctx context.Context, n node) error {
	cmd := exec.CommandContext(ctx, n.bin("kubectl"), "--kubeconfig", n.AdminKubeconfig(),
		"apply", "--server-side", "--force-conflicts", "--field-manager=make-cluster", "-f", "-")
	cmd.Stdin = strings.NewReader(n.addonsManifest())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("applying the node's addons: %w\n%s", err, out)
	}
	return nil
}

// dnsReady waits until CoreDNS has a Ready replica behind the kube-dns Service.
func dnsReady(ctx context.Context, client kubernetes.Interface) error {
	return poll(ctx, 2*time.Minute, func() error {
		d, err := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas < 1 {
			return errors.New("CoreDNS has no Ready replica")
		}
		return nil
	})
}
