package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// apiServer is shared by the tests of this package, with the throwaway CRDs in
// testdata/.
var apiServer = NewShared(Options{CRDDir: "testdata"})

func TestMain(m *testing.M) {
	if dir := os.Getenv(killedParentEnv); dir != "" {
		startAndDie(dir) // never returns
	}
	os.Exit(apiServer.Run(m))
}

const testTimeout = 30 * time.Second

var widgets = schema.GroupVersionResource{Group: "testenv.proxyfleet.io", Version: "v1", Resource: "widgets"}

func clientset(t *testing.T) *kubernetes.Clientset {
	env := apiServer.Get(t)
	t.Helper()
	c, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// until polls check until it returns nil, and fails the test with its last
// error after testTimeout.
func until(t *testing.T, check func(ctx context.Context) error) {
	t.Helper()
	eventually.Check(t, testTimeout, 50*time.Millisecond, "condition", check)
}

func TestAdminListsSystemNamespaces(t *testing.T) {
	c := clientset(t)
	want := []string{"default", "kube-node-lease", "kube-public", "kube-system"}
	// The API server creates these in a post-start hook that /readyz need not wait for.
	until(t, func(ctx context.Context) error {
		list, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var got []string
		for _, ns := range list.Items {
			if slices.Contains(want, ns.Name) {
				got = append(got, ns.Name)
			}
		}
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			return errors.New("system namespaces (-want +got):\n" + diff)
		}
		return nil
	})
}

func TestServerVersionIsPinned(t *testing.T) {
	v, err := clientset(t).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	// hack/tools/build.sh sets these; without them the emulation version breaks.
	if v.Major != "1" || v.Minor == "" || !strings.HasPrefix(v.GitVersion, "v1.") {
		t.Errorf("server version %+v: want the pinned v1.x release, not a dev build", v)
	}
}

func TestKubeconfigWorksWithKubectl(t *testing.T) {
	env := apiServer.Get(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"namespaces": {args: []string{"get", "ns", "-o", "name"}, want: []string{"namespace/default", "namespace/kube-system"}},
		"CRD":        {args: []string{"get", "crd", "-o", "name"}, want: []string{"customresourcedefinition.apiextensions.k8s.io/widgets.testenv.proxyfleet.io"}},
		"whoami":     {args: []string{"auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"}, want: []string{"admin"}},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), env.KubectlPath(), append([]string{"--kubeconfig", kubeconfig}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl %v: %v\n%s", tc.args, err, out)
			}
			for _, w := range tc.want {
				if !slices.Contains(strings.Fields(string(out)), w) {
					t.Errorf("kubectl %v: %q not in output:\n%s", tc.args, w, out)
				}
			}
		})
	}
}

func TestServiceAccountTokenAuthenticates(t *testing.T) {
	env := apiServer.Get(t)
	token, err := env.ServiceAccountToken(t.Context(), "tokens", "lease-user", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A second call finds the namespace and ServiceAccount in place.
	if _, err := env.ServiceAccountToken(t.Context(), "tokens", "lease-user", 0); err != nil {
		t.Fatalf("second token: %v", err)
	}
	wantUser := "system:serviceaccount:tokens:lease-user"
	for name, tc := range map[string]struct {
		token      string
		wantAuthn  bool
		wantUser   string
		wantGroups []string
	}{
		"ServiceAccount token": {
			token:      token,
			wantAuthn:  true,
			wantUser:   wantUser,
			wantGroups: []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:tokens"},
		},
		"forged token": {token: "not-a-token"},
	} {
		t.Run(name, func(t *testing.T) {
			review, err := clientset(t).AuthenticationV1().TokenReviews().Create(t.Context(),
				&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tc.token}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			groups := slices.Sorted(slices.Values(review.Status.User.Groups))
			if diff := cmp.Diff(tc.wantGroups, groups); diff != "" {
				t.Errorf("groups (-want +got):\n%s", diff)
			}
			got := struct {
				Authenticated bool
				User          string
			}{review.Status.Authenticated, review.Status.User.Username}
			want := struct {
				Authenticated bool
				User          string
			}{tc.wantAuthn, tc.wantUser}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("TokenReview (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("UserConfig", func(t *testing.T) {
		c, err := kubernetes.NewForConfig(env.UserConfig(token))
		if err != nil {
			t.Fatal(err)
		}
		review, err := c.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := review.Status.UserInfo.Username; got != wantUser {
			t.Errorf("SelfSubjectReview user = %q, want %q", got, wantUser)
		}
	})

	t.Run("TTL below the API minimum", func(t *testing.T) {
		_, err := env.ServiceAccountToken(t.Context(), "tokens", "lease-user", time.Minute)
		if !apierrors.IsInvalid(err) {
			t.Errorf("err = %v, want Invalid", err)
		}
	})
}

func TestSubjectAccessReviewFollowsRBAC(t *testing.T) {
	env := apiServer.Get(t)
	const ns, sa = "sar", "reader"
	ctx := t.Context()
	c := clientset(t)
	token, err := env.ServiceAccountToken(ctx, ns, sa, 0)
	if err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ns + ":" + sa
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	allowed := func(ctx context.Context, attrs authorizationv1.ResourceAttributes) (bool, error) {
		review, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return review.Status.Allowed, nil
	}
	getConfigMaps := authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "configmaps"}

	if ok, err := allowed(ctx, getConfigMaps); err != nil || ok {
		t.Fatalf("before RBAC: allowed = %v, err = %v; want denied", ok, err)
	}

	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmap-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}},
	}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmap-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The RBAC authorizer reads roles from an informer: the grant shows up shortly.
	until(t, func(ctx context.Context) error {
		if ok, err := allowed(ctx, getConfigMaps); err != nil || !ok {
			return errors.Join(errors.New("not allowed yet"), err)
		}
		return nil
	})

	for name, tc := range map[string]struct {
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		"get configmaps":                  {attrs: getConfigMaps, want: true},
		"list configmaps":                 {attrs: authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Resource: "configmaps"}, want: true},
		"delete configmaps":               {attrs: authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Resource: "configmaps"}},
		"get secrets":                     {attrs: authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets"}},
		"get configmaps elsewhere":        {attrs: authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "configmaps"}},
		"list configmaps cluster-wide":    {attrs: authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps"}},
		"create tokenreviews (lease API)": {attrs: authorizationv1.ResourceAttributes{Group: "authentication.k8s.io", Verb: "create", Resource: "tokenreviews"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := allowed(t.Context(), tc.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("allowed = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("as the ServiceAccount", func(t *testing.T) {
		c, err := kubernetes.NewForConfig(env.UserConfig(token))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{}); err != nil {
			t.Errorf("list configmaps: %v", err)
		}
		if _, err := c.CoreV1().Secrets(ns).List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list secrets: err = %v, want Forbidden", err)
		}
	})
}

func TestCRDsAreServed(t *testing.T) {
	env := apiServer.Get(t)
	resources, err := clientset(t).Discovery().ServerResourcesForGroupVersion("testenv.proxyfleet.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{} // resource name → namespaced
	for _, r := range resources.APIResources {
		got[r.Name] = r.Namespaced
	}
	if diff := cmp.Diff(map[string]bool{"widgets": true, "gadgets": false}, got); diff != "" {
		t.Errorf("served resources (-want +got):\n%s", diff)
	}

	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		size        int64
		wantInvalid bool
	}{
		"valid":                 {size: 2},
		"schema minimum broken": {size: 0, wantInvalid: true},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWidget("crd-"+strings.ReplaceAll(name, " ", "-"), tc.size)
			_, err := dc.Resource(widgets).Namespace("default").Create(t.Context(), w, metav1.CreateOptions{})
			if got := apierrors.IsInvalid(err); got != tc.wantInvalid || (err != nil && !got) {
				t.Errorf("create widget with size %d: err = %v, want invalid = %v", tc.size, err, tc.wantInvalid)
			}
		})
	}
}

func TestRestartAPIServerKeepsData(t *testing.T) {
	env := apiServer.Get(t)
	ctx := t.Context()
	c := clientset(t)
	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "survives-restart"}, Data: map[string]string{"k": "v"}}
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Resource(widgets).Namespace("default").Create(ctx, newWidget("survives-restart", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	oldPID, host := env.apiserver.pid(), env.Config.Host

	if err := env.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if env.apiserver.pid() == oldPID || env.Config.Host != host {
		t.Errorf("after restart: pid %d (was %d), host %s (was %s); want a new process on the same host", env.apiserver.pid(), oldPID, env.Config.Host, host)
	}
	if !processGone(oldPID) {
		t.Errorf("old kube-apiserver %d still running", oldPID)
	}
	// The clients made before the restart reconnect.
	got, err := c.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cm.Data, got.Data); diff != "" {
		t.Errorf("ConfigMap data (-want +got):\n%s", diff)
	}
	w, err := dc.Resource(widgets).Namespace("default").Get(ctx, "survives-restart", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(w.Object, "spec", "size"); size != 3 {
		t.Errorf("widget size = %d, want 3", size)
	}
}

// TestCompactEtcdForgetsHistory: after CompactEtcd, etcd refuses to read
// at a revision before it, which is what makes a watch resuming from there
// expire.
func TestCompactEtcdForgetsHistory(t *testing.T) {
	env := apiServer.Get(t)
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "compacted"}}
	created, err := clientset(t).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before, err := strconv.ParseInt(created.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	created.Data = map[string]string{"changed": "yes"}
	if _, err := clientset(t).CoreV1().ConfigMaps("default").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	revision, err := env.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if revision <= before {
		t.Errorf("compacted to %d, want past the ConfigMap's revision %d", revision, before)
	}
	err = env.etcdCall(ctx, "/v3/kv/range", map[string]any{"key": "AA==", "revision": before}, nil)
	if err == nil || !strings.Contains(err.Error(), "compacted") {
		t.Errorf("reading at revision %d after compacting to %d: %v, want an error saying it was compacted", before, revision, err)
	}
}

func TestStopLeavesNothing(t *testing.T) {
	integration.Needs(t, Needs)
	t.Parallel()
	var out strings.Builder // written under the prefixWriters' lock, read after Stop
	e, err := Start(t.Context(), Options{CRDDir: t.TempDir(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{e.etcd.pid(), e.apiserver.pid()}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"\netcd: ", "\nkube-apiserver: "} {
		if !strings.Contains(out.String(), prefix) {
			t.Errorf("Options.Out has no line starting with %q", prefix[1:])
		}
	}
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("process %d still running after Stop", pid)
		}
	}
	if _, err := os.Stat(e.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s after Stop: err = %v, want it removed", e.Dir, err)
	}
	if err := e.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestKeptDirIsReused(t *testing.T) {
	integration.Needs(t, Needs)
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	opts := Options{CRDDir: "testdata", Dir: dir}
	start := func() *Environment {
		t.Helper()
		e, err := Start(t.Context(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Stop() })
		return e
	}

	first := start()
	c, err := kubernetes.NewForConfig(first.Config)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kept"}, Data: map[string]string{"k": "v"}}
	if _, err := c.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pids := []int{first.etcd.pid(), first.apiserver.pid()}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("process %d still running after Stop", pid)
		}
	}
	for _, f := range []string{"etcd.log", "kube-apiserver.log", "pki/ca.crt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("kept dir after Stop: %v", err)
		}
	}

	second := start()
	if diff := cmp.Diff(first.Config.CAData, second.Config.CAData); diff != "" {
		t.Errorf("CA changed across restarts (-first +second):\n%s", diff)
	}
	c, err = kubernetes.NewForConfig(second.Config)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.CoreV1().ConfigMaps("default").Get(t.Context(), cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ConfigMap from the first run: %v", err)
	}
	if diff := cmp.Diff(cm.Data, got.Data); diff != "" {
		t.Errorf("ConfigMap data (-want +got):\n%s", diff)
	}
}

func TestPortClashIsRetried(t *testing.T) {
	env := apiServer.Get(t)
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	p, err := ensurePKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	e := &Environment{binDir: env.binDir, Dir: dir, keepDir: true, pki: p}
	// The first pick of each size hands out the taken port, as when another test
	// binds it between freePorts and the child's bind.
	clashed := map[int]bool{}
	e.ports = func(n int) ([]int, error) {
		ports, err := freePorts(n)
		if err == nil && !clashed[n] {
			clashed[n] = true
			ports[0] = takenPort
		}
		return ports, err
	}
	t.Cleanup(func() { e.Stop() })

	if err := e.startEtcd(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.startAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	suffix := ":" + strconv.Itoa(takenPort)
	if strings.HasSuffix(e.etcdURL, suffix) || strings.HasSuffix(e.Config.Host, suffix) {
		t.Errorf("etcd %s, kube-apiserver %s: want neither on the taken port %d", e.etcdURL, e.Config.Host, takenPort)
	}
	if diff := cmp.Diff(map[int]bool{1: true, 2: true}, clashed); diff != "" {
		t.Errorf("port picks that clashed (-want +got):\n%s", diff)
	}
}

// killedParentEnv makes the test binary a helper that starts an Environment in the
// dir it names, prints the children's pids and dies by SIGKILL without Stop.
const killedParentEnv = "TESTENV_KILLED_PARENT_DIR"

func startAndDie(dir string) {
	e, err := Start(context.Background(), Options{Dir: dir, CRDDir: filepath.Join(dir, "no-crds")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(e.etcd.pid(), e.apiserver.pid())
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func TestKilledParentLeavesNothing(t *testing.T) {
	integration.Needs(t, Needs)
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "no-crds"), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killedParentEnv+"="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper: err = %v, want killed by SIGKILL\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("helper output %q: %v", out, err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("helper output %q: want the pids of etcd and kube-apiserver", out)
	}
	// Pdeathsig is delivered as the parent dies; the kill itself is asynchronous.
	until(t, func(context.Context) error {
		for _, pid := range pids {
			if !processGone(pid) {
				return fmt.Errorf("process %d still running after its parent was killed", pid)
			}
		}
		return nil
	})
}

func TestStartFailsWithAReason(t *testing.T) {
	// A bin dir whose etcd fails at once, to see its output in the error.
	failingBin := t.TempDir()
	for name, script := range map[string]string{
		"etcd":           "#!/bin/sh\necho 'etcd: cannot open data dir: boom' >&2\nexit 3\n",
		"kube-apiserver": "#!/bin/sh\nexit 1\n",
		"kubectl":        "#!/bin/sh\nexit 1\n",
	} {
		if err := os.WriteFile(filepath.Join(failingBin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	wrongKind := t.TempDir()
	if err := os.WriteFile(filepath.Join(wrongKind, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	for name, tc := range map[string]struct {
		opts   Options
		starts bool     // the failure comes from a started process
		want   []string // substrings of the error
	}{
		"binaries missing": {
			opts: Options{BinDir: t.TempDir(), CRDDir: "testdata"},
			want: []string{"/kube-apiserver not found: run `make testenv`"},
		},
		"CRD dir missing": {
			opts: Options{CRDDir: filepath.Join(t.TempDir(), "nope")},
			want: []string{"CRD dir"},
		},
		"not a CRD": {
			opts: Options{CRDDir: wrongKind},
			want: []string{"cm.yaml", "want an apiextensions.k8s.io/v1 CustomResourceDefinition, got /v1, Kind=ConfigMap"},
		},
		"etcd exits": {
			opts:   Options{BinDir: failingBin, CRDDir: "testdata"},
			starts: true,
			want:   []string{"etcd: not ready", "exited before it was ready", "exit status 3", "cannot open data dir: boom"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.starts {
				integration.Needs(t, "sh, as a failing etcd")
			}
			e, err := Start(t.Context(), tc.opts)
			if err == nil {
				e.Stop()
				t.Fatal("Start succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFindRepoRoot(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Clean(filepath.Join(wd, "..", "..", "..")) // pkg/testing/testenv
	for name, tc := range map[string]struct {
		dir     string
		want    string
		wantErr bool
	}{
		"package dir":                  {dir: wd, want: root},
		"root":                         {dir: root, want: root},
		"inside the hack/tools module": {dir: filepath.Join(root, "hack", "tools"), want: root},
		"outside the repo":             {dir: t.TempDir(), wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := findRepoRoot(tc.dir)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("root = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPrefixWriterKeepsLinesWhole(t *testing.T) {
	var out strings.Builder
	var mu sync.Mutex
	etcd := &prefixWriter{prefix: "etcd: ", mu: &mu, out: &out}
	api := &prefixWriter{prefix: "kube-apiserver: ", mu: &mu, out: &out}
	for _, w := range []struct {
		pw   *prefixWriter
		data string
	}{
		{etcd, "one "}, {api, "a\nb"}, {etcd, "line\ntwo\n"}, {api, "\n"}, {etcd, "tail"},
	} {
		if _, err := w.pw.Write([]byte(w.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := etcd.Close(); err != nil {
		t.Fatal(err)
	}
	want := "kube-apiserver: a\netcd: one line\netcd: two\nkube-apiserver: b\netcd: tail\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	var b tailBuffer
	for i := range tailBytes / 10 {
		b.Write([]byte(strings.Repeat(string(rune('a'+i%26)), 9) + "\n"))
	}
	b.Write([]byte("last line\n"))
	lines := strings.Split(b.lastLines(3), "\n")
	if diff := cmp.Diff(3, len(lines)); diff != "" {
		t.Fatalf("line count (-want +got):\n%s", diff)
	}
	if lines[2] != "last line" {
		t.Errorf("last line = %q", lines[2])
	}
	if len(b.buf) > tailBytes {
		t.Errorf("buffer holds %d bytes, more than %d", len(b.buf), tailBytes)
	}
}

// processGone reports whether pid has exited. A zombie counts as gone: after its
// parent dies it waits for whoever adopts it to reap it.
func processGone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name in parentheses, which may hold ") ".
	i := bytes.LastIndex(stat, []byte(") "))
	return i >= 0 && bytes.HasPrefix(stat[i+2:], []byte("Z"))
}

func newWidget(name string, size int64) *unstructured.Unstructured {
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("testenv.proxyfleet.io/v1")
	w.SetKind("Widget")
	w.SetName(name)
	_ = unstructured.SetNestedField(w.Object, size, "spec", "size")
	return w
}

// Under -short Start refuses, loudly, before it starts a process: the unit
// loop starts no kube-apiserver or etcd. Without -short it goes on to start
// the (here failing) etcd. The binaries and CRDs exist, so nothing else
// stops it first.
func TestStartPanicsOnlyUnderShort(t *testing.T) {
	fakeBin := t.TempDir()
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl"} {
		if err := os.WriteFile(filepath.Join(fakeBin, name), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	start := func() (panicked string, err error) {
		defer func() {
			if r := recover(); r != nil {
				panicked = fmt.Sprint(r)
			}
		}()
		_, err = Start(t.Context(), Options{BinDir: fakeBin, CRDDir: "testdata"})
		return "", err
	}
	panicked, err := start()
	if testing.Short() {
		if !strings.Contains(panicked, "integration.Needs(t, testenv.Needs)") {
			t.Errorf("Start under -short: panic %q, error %v; want a panic naming integration.Needs(t, testenv.Needs)", panicked, err)
		}
		return
	}
	if panicked != "" || err == nil || !strings.Contains(err.Error(), "etcd: not ready") {
		t.Errorf("Start without -short: panic %q, error %v; want etcd's failure", panicked, err)
	}
}
