package artifacts_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	podprovider "github.com/proxyfleet/proxy-operator/pkg/provider/kubernetes"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

const (
	chartDir = "helm/proxy-operator"
	// The install's namespace and release name: the defaults of both.
	namespace = "proxy-operator"
	// imageRepo is where make image's operator image is pushed (hack/image).
	imageRepo = "ghcr.io/proxyfleet/proxy-operator"
)

// tool is a binary built into bin/: kubectl by make testenv, helm and
// promtool by make testtools.
func tool(t *testing.T, name string) string {
	t.Helper()
	target := "make testenv"
	if name == "helm" || name == "promtool" {
		target = "make testtools"
	}
	integration.Needs(t, "bin/"+name+" from `"+target+"`")
	path, err := filepath.Abs(filepath.Join("..", "bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s not found: run `%s`", path, target)
	}
	return path
}

// run runs a command in this directory and returns its stdout; it fails the
// test with stderr when the command fails.
func run(t *testing.T, stdin []byte, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	// helm keeps its caches and config under these; keep them out of $HOME.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// track reads every file under dirs in the test process, so that go test's
// cache, which sees only the files a test opens itself, reruns the test when
// one changes that only helm, kubectl or promtool read.
func track(t *testing.T, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			_, err = os.ReadFile(path)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func version(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

func renderKustomize(t *testing.T) []byte {
	t.Helper()
	track(t, "kustomization.yaml", "crd", "rbac", "deploy")
	return []byte(run(t, nil, tool(t, "kubectl"), "kustomize", "."))
}

// renderHelm renders the chart as `helm install proxy-operator -n proxy-operator` would.
func renderHelm(t *testing.T, set ...string) []byte {
	t.Helper()
	track(t, chartDir)
	args := []string{"template", "proxy-operator", chartDir, "--namespace", namespace, "--include-crds"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return []byte(run(t, nil, tool(t, "helm"), args...))
}

// decode splits a multi-document YAML stream into objects.
func decode(t *testing.T, stream []byte) []*unstructured.Unstructured {
	t.Helper()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var out []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		if string(raw) == "null" {
			continue // a document of comments only
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil { // integers stay int64
			t.Fatalf("%v\n%s", err, doc)
		}
		out = append(out, obj)
	}
}

func key(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

func byKey(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[key(o)] = o
	}
	return out
}

// The image every install points at, for the operator and the gateway tier
// alike, is the one make image tags: VERSION.
func TestImagesAreTheVersionMakeImageTags(t *testing.T) {
	want := imageRepo + ":" + version(t)
	for where, objs := range map[string][]*unstructured.Unstructured{
		"kubectl kustomize artifacts": decode(t, renderKustomize(t)),
		"helm template":               decode(t, renderHelm(t)),
	} {
		var images []string
		for _, o := range objs {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				images = append(images, c.(map[string]any)["image"].(string))
			}
		}
		if diff := cmp.Diff([]string{want, want}, images); diff != "" {
			t.Errorf("%s: container images (-want +got):\n%s", where, diff)
		}
	}
	raw, err := os.ReadFile("deploy/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "image: "+want+"\n") {
		t.Errorf("deploy/deployment.yaml does not name %s", want)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	raw, err = os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != version(t) {
		t.Errorf("Chart.yaml appVersion %q, want VERSION %q", chart.AppVersion, version(t))
	}
}

// Every CRD of artifacts/crd is installed by the kustomization and shipped,
// byte for byte, in the chart's crds/.
func TestEveryCRDIsInstalled(t *testing.T) {
	files, err := filepath.Glob("crd/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in crd/: %v", err)
	}
	raw, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &kustomization); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.Contains(kustomization.Resources, f) {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
		want, _ := os.ReadFile(f)
		got, err := os.ReadFile(filepath.Join(chartDir, "crds", filepath.Base(f)))
		if err != nil || !bytes.Equal(want, got) {
			t.Errorf("%s/crds/%s is not a copy of %s (cp it over after make generate): %v", chartDir, filepath.Base(f), f, err)
		}
	}
}

func TestHelmLint(t *testing.T) {
	track(t, chartDir)
	out := run(t, nil, tool(t, "helm"), "lint", "--strict", chartDir)
	if !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint:\n%s", out)
	}
	// Every optional part renders too.
	run(t, nil, tool(t, "helm"), "lint", "--strict", chartDir, "--set", "gateway.enabled=true,watchNamespace=crawlers,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,inspection.enabled=true")
}

// normalize drops what may differ between the two installs: Helm's
// bookkeeping labels on the objects themselves (never on Pod templates or
// selectors) and comments (gone by now).
func normalize(o *unstructured.Unstructured) map[string]any {
	c := o.DeepCopy()
	c.SetLabels(nil)
	c.SetAnnotations(nil)
	return c.Object
}

// The chart's defaults install what kubectl apply -k artifacts/ installs,
// object for object, except the Namespace (helm install --create-namespace).
func TestKustomizeAndHelmInstallTheSame(t *testing.T) {
	fromKustomize := byKey(decode(t, renderKustomize(t)))
	fromHelm := byKey(decode(t, renderHelm(t)))
	delete(fromKustomize, "Namespace /"+namespace)
	var kKeys, hKeys []string
	for k := range fromKustomize {
		kKeys = append(kKeys, k)
	}
	for k := range fromHelm {
		hKeys = append(hKeys, k)
	}
	slices.Sort(kKeys)
	slices.Sort(hKeys)
	if diff := cmp.Diff(kKeys, hKeys); diff != "" {
		t.Fatalf("objects (-kustomize +helm):\n%s", diff)
	}
	for k, want := range fromKustomize {
		if diff := cmp.Diff(normalize(want), normalize(fromHelm[k])); diff != "" {
			t.Errorf("%s (-kustomize +helm):\n%s", k, diff)
		}
	}
}

// The knobs do what they say.
func TestHelmValues(t *testing.T) {
	objs := byKey(decode(t, renderHelm(t,
		"replicaCount=3", "image.tag=v9.9.9", "watchNamespace=crawlers", "leaseAuth=none",
		"providers={kubernetes,gce}", "gateway.enabled=true", "metrics.serviceMonitor.enabled=true",
		"metrics.prometheusRule.enabled=true", "resources.limits.memory=1Gi")))
	deploy := objs["Deployment "+namespace+"/proxy-operator"]
	if deploy == nil {
		t.Fatal("no Deployment")
	}
	replicas, _, _ := unstructured.NestedInt64(deploy.Object, "spec", "replicas")
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	for _, want := range []string{"--namespace=crawlers", "--lease-auth=none", "--providers=kubernetes,gce"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	gatewayArgs := containerArgs(t, objs["Deployment "+namespace+"/proxy-operator-gateway"])
	for _, want := range []string{"gateway", "--lease-auth=none", "--listen=:3128",
		"--lease-url=http://proxy-operator-leases:8080"} {
		if !slices.Contains(gatewayArgs, want) {
			t.Errorf("gateway args %q lack %s", gatewayArgs, want)
		}
	}
	// Another release name: the URL follows the leases Service's name.
	other := byKey(decode(t, []byte(run(t, nil, tool(t, "helm"), "template", "crawl", chartDir, "--namespace", namespace))))
	if other["Service "+namespace+"/crawl-proxy-operator-leases"] == nil ||
		!slices.Contains(containerArgs(t, other["Deployment "+namespace+"/crawl-proxy-operator-gateway"]),
			"--lease-url=http://crawl-proxy-operator-leases:8080") {
		t.Error("release crawl: the gateway's --lease-url does not name the crawl-proxy-operator-leases Service")
	}
	if replicas != 3 || c["image"] != imageRepo+":v9.9.9" {
		t.Errorf("replicas %d image %v, want 3 and %s:v9.9.9", replicas, c["image"], imageRepo)
	}
	if mem, _, _ := unstructured.NestedString(c, "resources", "limits", "memory"); mem != "1Gi" {
		t.Errorf("memory limit %q, want 1Gi", mem)
	}
	for _, want := range []string{
		"Service " + namespace + "/proxy-operator-gateway",
		"ServiceMonitor " + namespace + "/proxy-operator",
		"PrometheusRule " + namespace + "/proxy-operator",
		"Role crawlers/proxy-operator",
		"RoleBinding crawlers/proxy-operator",
	} {
		if objs[want] == nil {
			t.Errorf("no %s rendered", want)
		}
	}
	if port, _, _ := unstructured.NestedSlice(objs["Service "+namespace+"/proxy-operator-gateway"].Object, "spec", "ports"); len(port) != 1 || port[0].(map[string]any)["port"] != int64(3128) {
		t.Errorf("gateway Service ports %v, want 3128", port)
	}
	// A namespaced install keeps only the reviews cluster-wide.
	rules, _, _ := unstructured.NestedSlice(objs["ClusterRole /proxy-operator"].Object, "rules")
	for _, r := range rules {
		for _, res := range r.(map[string]any)["resources"].([]any) {
			if res != "tokenreviews" && res != "subjectaccessreviews" {
				t.Errorf("namespaced install: the ClusterRole grants %v cluster-wide", res)
			}
		}
	}
	rule, _, _ := unstructured.NestedSlice(objs["PrometheusRule "+namespace+"/proxy-operator"].Object, "spec", "groups")
	if len(rule) != len(readRules(t, rulesFile).Groups) {
		t.Errorf("the PrometheusRule has %d groups, want the rules file's", len(rule))
	}
	// The chart refuses what the operator would refuse.
	cmd := exec.Command(tool(t, "helm"), "template", "x", chartDir, "--set", "leaseAuth=token")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "leaseAuth") {
		t.Errorf("helm template with leaseAuth=token: err %v, output %s; want a failure naming leaseAuth", err, out)
	}
}

// The Pods' labels follow Helm's convention for any release name (name: the
// chart, instance: the release, component: operator or gateway), and so do
// the kustomize base's: the kubernetes provider's NetworkPolicies admit the
// operator and the gateway by OperatorPodLabels, which both carry; each
// Deployment, Service and PodDisruptionBudget selects its own Pods only.
func TestPodLabelsHoldForAnyRelease(t *testing.T) {
	installs := map[string]map[string]*unstructured.Unstructured{
		"kustomize":              byKey(decode(t, renderKustomize(t))),
		"helm, release crawl":    byKey(decode(t, []byte(run(t, nil, tool(t, "helm"), "template", "crawl", chartDir, "--namespace", namespace)))),
		"helm, release proxy-op": byKey(decode(t, []byte(run(t, nil, tool(t, "helm"), "template", "proxy-op", chartDir, "--namespace", namespace)))),
	}
	prefixes := map[string]string{"kustomize": "proxy-operator", "helm, release crawl": "crawl-proxy-operator", "helm, release proxy-op": "proxy-op-proxy-operator"}
	instances := map[string]string{"kustomize": "proxy-operator", "helm, release crawl": "crawl", "helm, release proxy-op": "proxy-op"}
	for name, objs := range installs {
		prefix := prefixes[name]
		pods := map[string]map[string]string{} // component → the Pod template's labels
		for component, deployment := range map[string]string{"operator": prefix, "gateway": prefix + "-gateway"} {
			d := objs["Deployment "+namespace+"/"+deployment]
			if d == nil {
				t.Fatalf("%s: no Deployment %s", name, deployment)
			}
			labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
			want := map[string]string{"app.kubernetes.io/name": "proxy-operator", "app.kubernetes.io/instance": instances[name], "app.kubernetes.io/component": component}
			if diff := cmp.Diff(want, labels); diff != "" {
				t.Errorf("%s: %s's Pod labels (-want +got):\n%s", name, deployment, diff)
			}
			for k, v := range podprovider.OperatorPodLabels {
				if labels[k] != v {
					t.Errorf("%s: %s's Pods lack %s=%s, which the proxy Pods' NetworkPolicies admit", name, deployment, k, v)
				}
			}
			pods[component] = labels
		}
		for _, sel := range []struct{ object, path, component string }{
			{"Deployment " + namespace + "/" + prefix, "spec.selector.matchLabels", "operator"},
			{"Deployment " + namespace + "/" + prefix + "-gateway", "spec.selector.matchLabels", "gateway"},
			{"Service " + namespace + "/" + prefix + "-metrics", "spec.selector", "operator"},
			{"Service " + namespace + "/" + prefix + "-gateway", "spec.selector", "gateway"},
			{"PodDisruptionBudget " + namespace + "/" + prefix, "spec.selector.matchLabels", "operator"},
			{"PodDisruptionBudget " + namespace + "/" + prefix + "-gateway", "spec.selector.matchLabels", "gateway"},
		} {
			o := objs[sel.object]
			if o == nil {
				t.Fatalf("%s: no %s", name, sel.object)
			}
			selector, _, _ := unstructured.NestedStringMap(o.Object, strings.Split(sel.path, ".")...)
			for component, labels := range pods {
				selects := len(selector) > 0
				for k, v := range selector {
					selects = selects && labels[k] == v
				}
				if selects != (component == sel.component) {
					t.Errorf("%s: %s (%v) selects the %s Pods: %v", name, sel.object, selector, component, selects)
				}
			}
		}
	}
}

// Both installs, and the chart with its optional parts, pass a server-side
// dry-run on a real API server: schemas, defaulting and admission of every
// object. The ServiceMonitor and PrometheusRule are left out (no
// prometheus-operator CRDs here).
func TestServerSideDryRun(t *testing.T) {
	_, kubeconfig, kubectl := startAPIServer(t) // the dry-run creates the CRDs
	// Namespaced objects are checked against a namespace that exists; a
	// dry-run of the Namespace alone would not create it.
	for _, ns := range []string{namespace, "crawlers", caNamespace} {
		run(t, nil, kubectl, "--kubeconfig", kubeconfig, "create", "namespace", ns)
	}
	for name, stream := range map[string][]byte{
		"kustomize":        renderKustomize(t),
		"helm":             renderHelm(t),
		"helm, all on":     renderHelm(t, "gateway.enabled=true", "watchNamespace=crawlers", "leaseAuth=none", "providers={kubernetes,local}"),
		"helm, 1 replica":  renderHelm(t, "replicaCount=1", "podDisruptionBudget.enabled=false"),
		"helm, inspection": renderHelm(t, "inspection.enabled=true"),
		"gateway HPA example": func() []byte {
			raw, err := os.ReadFile("../examples/gateway/hpa.yaml")
			if err != nil {
				t.Fatal(err)
			}
			var o unstructured.Unstructured
			if err := yaml.Unmarshal(raw, &o.Object); err != nil {
				t.Fatal(err)
			}
			o.SetNamespace(namespace)
			out, _ := yaml.Marshal(o.Object)
			return out
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			var docs []string
			want := 0
			for _, o := range decode(t, stream) {
				if o.GetAPIVersion() == "monitoring.coreos.com/v1" {
					continue
				}
				raw, err := json.Marshal(o.Object)
				if err != nil {
					t.Fatal(err)
				}
				docs = append(docs, string(raw))
				want++
			}
			out := run(t, []byte(strings.Join(docs, "\n---\n")), kubectl, "--kubeconfig", kubeconfig,
				"apply", "--server-side", "--dry-run=server", "--field-manager=install-test", "-o", "name", "-f", "-")
			if got := len(strings.Fields(out)); got != want {
				t.Errorf("dry-run applied %d objects, want %d:\n%s", got, want, out)
			}
		})
	}
}

// startAPIServer starts a real API server without CRDs for the test, and
// returns it, an admin kubeconfig of it and bin/kubectl.
func startAPIServer(t *testing.T) (env *testenv.Environment, kubeconfig, kubectl string) {
	t.Helper()
	integration.Needs(t, testenv.Needs)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, testenv.Options{CRDDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return env, kubeconfig, env.KubectlPath()
}

// containerArgs are the first container's args of a workload.
func containerArgs(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	if o == nil {
		t.Fatal("no such workload rendered")
	}
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	var args []string
	for _, a := range containers[0].(map[string]any)["args"].([]any) {
		args = append(args, a.(string))
	}
	return args
}

// diffJSON compares two values by their JSON form.
func diffJSON(want, got any) string {
	var w, g any
	for _, p := range []struct {
		in  any
		out *any
	}{{want, &w}, {got, &g}} {
		raw, err := json.Marshal(p.in)
		if err != nil {
			return err.Error()
		}
		if err := json.Unmarshal(raw, p.out); err != nil {
			return err.Error()
		}
	}
	return cmp.Diff(w, g)
}
