package artifacts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// The installs' side of the lease store's replication
// (--lease-replication=raft, docs/operations.md "Replicas and the quorum"):
// what the chart and the kustomize base give the replicas, and what the
// leaseReplication values change.

// Names pkg/operator uses for the replication (not imported: that would
// build the whole operator into this test).
const (
	peerCASecret      = "proxy-operator-peer-ca"
	replicasConfigMap = "proxy-operator-replicas"
	leaseIDKeySecret  = "proxy-operator-lease-key"
	raftDir           = "/var/lib/proxy-operator/raft"
)

// replicationView is what an install sets up for the replication.
type replicationView struct {
	Replicas int64
	// Args are the operator's replication flags, in order.
	Args []string
	// Env are the downward-API variables beyond POD_NAME and POD_NAMESPACE.
	Env      map[string]string
	Ports    map[string]int64
	RaftDir  string // the mount of the volume "raft" ("" without)
	DirLimit string // its emptyDir's sizeLimit
	// LeasesSelectsLeader: the leases Service selects the leader's label.
	LeasesSelectsLeader bool
	PDBMinAvailable     int64
	NetworkPolicy       bool
}

func viewReplication(t *testing.T, objs map[string]*unstructured.Unstructured) replicationView {
	t.Helper()
	deploy := objs["Deployment "+namespace+"/proxy-operator"]
	if deploy == nil {
		t.Fatal("no Deployment proxy-operator")
	}
	var v replicationView
	v.Replicas, _, _ = unstructured.NestedInt64(deploy.Object, "spec", "replicas")
	for _, a := range containerArgs(t, deploy) {
		for _, flag := range []string{"--lease-replication=", "--peer-addr=", "--raft-dir=", "--replica-selector="} {
			if strings.HasPrefix(a, flag) {
				v.Args = append(v.Args, a)
			}
		}
	}
	c := operatorContainer(t, deploy)
	env, _, _ := unstructured.NestedSlice(c, "env")
	for _, e := range env {
		name := e.(map[string]any)["name"].(string)
		path, _, _ := unstructured.NestedString(e.(map[string]any), "valueFrom", "fieldRef", "fieldPath")
		if name != "POD_NAME" && name != "POD_NAMESPACE" {
			if v.Env == nil {
				v.Env = map[string]string{}
			}
			v.Env[name] = path
		}
	}
	v.Ports = map[string]int64{}
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	for _, p := range ports {
		v.Ports[p.(map[string]any)["name"].(string)] = p.(map[string]any)["containerPort"].(int64)
	}
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	for _, m := range mounts {
		if m.(map[string]any)["name"] == "raft" {
			v.RaftDir = m.(map[string]any)["mountPath"].(string)
		}
	}
	volumes, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "volumes")
	for _, vol := range volumes {
		if vol.(map[string]any)["name"] == "raft" {
			v.DirLimit, _, _ = unstructured.NestedString(vol.(map[string]any), "emptyDir", "sizeLimit")
		}
	}
	selector, _, _ := unstructured.NestedStringMap(objs["Service "+namespace+"/proxy-operator-leases"].Object, "spec", "selector")
	v.LeasesSelectsLeader = selector["crawl.proxyfleet.io/leader"] == "true"
	if pdb := objs["PodDisruptionBudget "+namespace+"/proxy-operator"]; pdb != nil {
		v.PDBMinAvailable, _, _ = unstructured.NestedInt64(pdb.Object, "spec", "minAvailable")
	}
	v.NetworkPolicy = objs["NetworkPolicy "+namespace+"/proxy-operator"] != nil
	return v
}

func operatorContainer(t *testing.T, deploy *unstructured.Unstructured) map[string]any {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", key(deploy), len(containers))
	}
	return containers[0].(map[string]any)
}

// The chart's leaseReplication values: raft by default (three replicas, a
// quorum of two kept through drains, the peer port admitted from the
// replicas only, every ready replica behind the leases Service), none for
// one or two replicas as before raft mode, and a mode the operator would
// refuse is refused.
func TestHelmLeaseReplication(t *testing.T) {
	selector := "--replica-selector=app.kubernetes.io/component=operator,app.kubernetes.io/instance=proxy-operator,app.kubernetes.io/name=proxy-operator"
	raftArgs := []string{"--lease-replication=raft", "--peer-addr=:7400", "--raft-dir=" + raftDir, selector}
	raftEnv := map[string]string{"POD_UID": "metadata.uid", "POD_IP": "status.podIP"}
	tests := map[string]struct {
		set  []string
		want replicationView
	}{
		"defaults": {want: replicationView{
			Replicas: 3, Args: raftArgs, Env: raftEnv, Ports: map[string]int64{"leases": 8080, "metrics": 9090, "peer": 7400},
			RaftDir: raftDir, DirLimit: "256Mi", PDBMinAvailable: 2, NetworkPolicy: true,
		}},
		"five replicas, another peer port and size": {
			set: []string{"replicaCount=5", "leaseReplication.peerPort=7500", "leaseReplication.raftDirSizeLimit=1Gi"},
			want: replicationView{
				Replicas: 5, Args: []string{"--lease-replication=raft", "--peer-addr=:7500", "--raft-dir=" + raftDir, selector},
				Env: raftEnv, Ports: map[string]int64{"leases": 8080, "metrics": 9090, "peer": 7500},
				RaftDir: raftDir, DirLimit: "1Gi", PDBMinAvailable: 3, NetworkPolicy: true,
			},
		},
		"raft without the NetworkPolicy": {
			set: []string{"networkPolicy.enabled=false"},
			want: replicationView{
				Replicas: 3, Args: raftArgs, Env: raftEnv, Ports: map[string]int64{"leases": 8080, "metrics": 9090, "peer": 7400},
				RaftDir: raftDir, DirLimit: "256Mi", PDBMinAvailable: 2,
			},
		},
		"none, two replicas": {
			set: []string{"leaseReplication.mode=none", "replicaCount=2"},
			want: replicationView{
				Replicas: 2, Ports: map[string]int64{"leases": 8080, "metrics": 9090},
				LeasesSelectsLeader: true, PDBMinAvailable: 1,
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := viewReplication(t, byKey(decode(t, renderHelm(t, tc.set...))))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	cmd := exec.Command(tool(t, "helm"), "template", "x", chartDir, "--set", "leaseReplication.mode=etcd")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "leaseReplication.mode") {
		t.Errorf("helm template with leaseReplication.mode=etcd: err %v, output %s; want a failure naming leaseReplication.mode", err, out)
	}
}

// For any release name, and in the kustomize base: --replica-selector
// selects the release's operator Pods and not its gateway's; the
// NetworkPolicy applies to the operator's Pods, admits the peer port (the
// container port "peer", --peer-addr's port) from those Pods only, and the
// lease and metrics ports from anywhere; --raft-dir is the emptyDir's mount.
func TestReplicasFindOnlyTheirOwnPods(t *testing.T) {
	installs := map[string]struct {
		objs   map[string]*unstructured.Unstructured
		prefix string
	}{
		"kustomize":           {byKey(decode(t, renderKustomize(t))), "proxy-operator"},
		"helm, release crawl": {byKey(decode(t, []byte(run(t, nil, tool(t, "helm"), "template", "crawl", chartDir, "--namespace", namespace)))), "crawl-proxy-operator"},
	}
	for name, in := range installs {
		t.Run(name, func(t *testing.T) {
			deploy, gateway := in.objs["Deployment "+namespace+"/"+in.prefix], in.objs["Deployment "+namespace+"/"+in.prefix+"-gateway"]
			policy := in.objs["NetworkPolicy "+namespace+"/"+in.prefix]
			if deploy == nil || gateway == nil || policy == nil {
				t.Fatalf("want the operator's and the gateway's Deployments and the NetworkPolicy %s", in.prefix)
			}
			operatorPods := podLabels(deploy)
			gatewayPods := podLabels(gateway)
			args := map[string]string{}
			for _, a := range containerArgs(t, deploy) {
				k, v, _ := strings.Cut(a, "=")
				args[k] = v
			}
			sel, err := labels.Parse(args["--replica-selector"])
			if err != nil || sel.Empty() {
				t.Fatalf("--replica-selector=%q: %v", args["--replica-selector"], err)
			}
			if !sel.Matches(operatorPods) || sel.Matches(gatewayPods) {
				t.Errorf("--replica-selector=%s selects the operator's Pods: %v, the gateway's: %v; want only the operator's", sel, sel.Matches(operatorPods), sel.Matches(gatewayPods))
			}

			ports := map[string]int64{}
			c := operatorContainer(t, deploy)
			list, _, _ := unstructured.NestedSlice(c, "ports")
			for _, p := range list {
				ports[p.(map[string]any)["name"].(string)] = p.(map[string]any)["containerPort"].(int64)
			}
			if _, port, err := net.SplitHostPort(args["--peer-addr"]); err != nil || port != fmt.Sprint(ports["peer"]) {
				t.Errorf("--peer-addr=%s, container port peer %d: want the same port", args["--peer-addr"], ports["peer"])
			}
			mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
			if len(mounts) != 1 || mounts[0].(map[string]any)["mountPath"] != args["--raft-dir"] {
				t.Errorf("volume mounts %v, want one at --raft-dir %s (the root filesystem is read-only)", mounts, args["--raft-dir"])
			}

			podSelector, _, _ := unstructured.NestedStringMap(policy.Object, "spec", "podSelector", "matchLabels")
			if !labels.SelectorFromSet(podSelector).Matches(operatorPods) || labels.SelectorFromSet(podSelector).Matches(gatewayPods) {
				t.Errorf("the NetworkPolicy applies to %v: want the operator's Pods only", podSelector)
			}
			type rule struct {
				From  string // "anywhere", "operator" or what else
				Ports []int64
			}
			var rules []rule
			ingress, _, _ := unstructured.NestedSlice(policy.Object, "spec", "ingress")
			for _, in := range ingress {
				r := rule{From: "anywhere"}
				if from, ok := in.(map[string]any)["from"].([]any); ok {
					r.From = fmt.Sprint(from)
					if len(from) == 1 {
						peers, _, _ := unstructured.NestedStringMap(from[0].(map[string]any), "podSelector", "matchLabels")
						if len(from[0].(map[string]any)) == 1 && labels.SelectorFromSet(peers).Matches(operatorPods) && !labels.SelectorFromSet(peers).Matches(gatewayPods) {
							r.From = "operator"
						}
					}
				}
				list, _ := in.(map[string]any)["ports"].([]any)
				for _, p := range list {
					r.Ports = append(r.Ports, p.(map[string]any)["port"].(int64))
				}
				rules = append(rules, r)
			}
			want := []rule{{"anywhere", []int64{ports["leases"], ports["metrics"]}}, {"operator", []int64{ports["peer"]}}}
			if diff := cmp.Diff(want, rules); diff != "" {
				t.Errorf("the NetworkPolicy's ingress (-want +got):\n%s", diff)
			}
		})
	}
}

func podLabels(deploy *unstructured.Unstructured) labels.Set {
	l, _, _ := unstructured.NestedStringMap(deploy.Object, "spec", "template", "metadata", "labels")
	return l
}

// access is one question to the API server's authorizer about a
// ServiceAccount of the operator's namespace.
type access struct {
	serviceAccount            string
	verb, resource, namespace string
	name                      string // "" for any
	allowed                   bool
}

func (a access) String() string {
	what := a.resource
	if a.name != "" {
		what += "/" + a.name
	}
	return fmt.Sprintf("%s %s %s in %s", a.serviceAccount, a.verb, what, a.namespace)
}

// The roles of three installs, applied to a real API server, give the
// replicas what raft mode uses in the operator's namespace (its Pods: get,
// list, patch; the marker ConfigMap: get, create, update; the peers' CA and
// the lease ID key: get, create), whether the operator watches every
// namespace, another one, or its own; and the gateway may read no Secret
// there, the peers' CA least of all: its key lets a peer vouch for any
// caller.
func TestReplicasRBAC(t *testing.T) {
	integration.Needs(t, testenv.Needs)
	installs := map[string][]byte{
		"proxy-operator": renderKustomize(t),
		"scoped":         []byte(run(t, nil, tool(t, "helm"), "template", "scoped", chartDir, "--namespace", namespace, "--set", "watchNamespace=crawlers")),
		"own":            []byte(run(t, nil, tool(t, "helm"), "template", "own", chartDir, "--namespace", namespace, "--set", "watchNamespace="+namespace)),
	}
	env, kubeconfig, kubectl := startAPIServer(t)
	for _, ns := range []string{namespace, "crawlers"} {
		run(t, nil, kubectl, "--kubeconfig", kubeconfig, "create", "namespace", ns)
	}
	var questions []access
	for release, stream := range installs {
		var docs []string
		for _, o := range decode(t, stream) {
			switch o.GetKind() {
			case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
				raw, err := json.Marshal(o.Object)
				if err != nil {
					t.Fatal(err)
				}
				docs = append(docs, string(raw))
			}
		}
		run(t, []byte(strings.Join(docs, "\n---\n")), env.KubectlPath(), "--kubeconfig", kubeconfig,
			"apply", "--server-side", "--field-manager=install-test", "-f", "-")
		op, gateway := release, release+"-gateway"
		if release != "proxy-operator" {
			op, gateway = release+"-proxy-operator", release+"-proxy-operator-gateway"
		}
		questions = append(questions, []access{
			{op, "get", "pods", namespace, "proxy-operator-abc", true},
			{op, "list", "pods", namespace, "", true},
			{op, "patch", "pods", namespace, "proxy-operator-abc", true},
			{op, "get", "configmaps", namespace, replicasConfigMap, true},
			{op, "create", "configmaps", namespace, "", true},
			{op, "update", "configmaps", namespace, replicasConfigMap, true},
			{op, "get", "secrets", namespace, peerCASecret, true},
			{op, "get", "secrets", namespace, leaseIDKeySecret, true},
			{op, "create", "secrets", namespace, "", true},
			{gateway, "get", "secrets", namespace, peerCASecret, false},
			{gateway, "list", "secrets", namespace, "", false},
			{gateway, "watch", "secrets", namespace, "", false},
		}...)
	}
	kube := kubernetes.NewForConfigOrDie(env.Config)
	// The roles reach the authorizer within a moment: wait for what they
	// allow, then ask everything.
	eventually.Check(t, time.Minute, 100*time.Millisecond, "the installs' roles in force", func(ctx context.Context) error {
		for _, q := range questions {
			if allowed, err := authorized(ctx, kube, q); err != nil || q.allowed && !allowed {
				return fmt.Errorf("%s: allowed %v, %v", q, allowed, err)
			}
		}
		return nil
	})
	for _, q := range questions {
		allowed, err := authorized(t.Context(), kube, q)
		if err != nil {
			t.Fatal(err)
		}
		if allowed != q.allowed {
			t.Errorf("%s: allowed %v, want %v", q, allowed, q.allowed)
		}
	}
	t.Logf("%d questions to the authorizer about %d installs", len(questions), len(installs))
}

// authorized asks the API server's authorizer (a SubjectAccessReview) about
// q, for the ServiceAccount token's user and groups.
func authorized(ctx context.Context, kube kubernetes.Interface, q access) (bool, error) {
	review, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + namespace + ":" + q.serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: q.namespace, Verb: q.verb, Resource: q.resource, Name: q.name,
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return review.Status.Allowed, nil
}
