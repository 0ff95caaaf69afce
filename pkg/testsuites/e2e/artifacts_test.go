package e2e_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// artifactsDir is the repository's artifacts/, from this package's directory.
const artifactsDir = "../../../artifacts"

// artifactNamespace is the namespace the artifacts install the operator in.
const artifactNamespace = "proxy-operator"

// The artifacts' names for the operator's own ServiceAccount and
// Deployment, and for the crawler role: the gateway tier's objects beside
// them are not the operator's.
const (
	operatorName    = "proxy-operator"
	crawlerRoleName = "proxy-operator-crawler"
)

// operatorArtifacts are the objects of artifacts/rbac and artifacts/deploy
// that one installation of the operator consists of, as the test applies
// them, and the crawler role that crawler workers are bound to. The
// Deployment is not applied (no controller-manager would run it): its Pod
// template becomes the placeholder Pod the leader labels.
type operatorArtifacts struct {
	namespace          *corev1.Namespace
	serviceAccount     *corev1.ServiceAccount
	clusterRole        *rbacv1.ClusterRole
	clusterRoleBinding *rbacv1.ClusterRoleBinding
	role               *rbacv1.Role
	roleBinding        *rbacv1.RoleBinding
	podTemplate        corev1.PodTemplateSpec
	services           []*corev1.Service
	// crawlerRole grants the verbs on proxies/leases that the lease API
	// checks; the minimality test leaves it whole.
	crawlerRole *rbacv1.ClusterRole
}

// loadArtifacts decodes artifacts/rbac and artifacts/deploy and picks out the
// operator's objects: its ServiceAccount, and the roles its bindings grant it.
func loadArtifacts(t *testing.T) operatorArtifacts {
	t.Helper()
	var objects []runtime.Object
	for _, dir := range []string{"rbac", "deploy"} {
		files, err := filepath.Glob(filepath.Join(artifactsDir, dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no artifacts in %s: %v", filepath.Join(artifactsDir, dir), err)
		}
		for _, file := range files {
			objs, err := decodeFile(file)
			if err != nil {
				t.Fatal(err)
			}
			objects = append(objects, objs...)
		}
	}

	var a operatorArtifacts
	var clusterRoles []*rbacv1.ClusterRole
	var roles []*rbacv1.Role
	var clusterRoleBindings []*rbacv1.ClusterRoleBinding
	var roleBindings []*rbacv1.RoleBinding
	for _, obj := range objects {
		switch o := obj.(type) {
		case *corev1.Namespace:
			a.namespace = o
		case *corev1.ServiceAccount:
			if o.Name == operatorName {
				a.serviceAccount = o
			}
		case *rbacv1.ClusterRole:
			clusterRoles = append(clusterRoles, o)
		case *rbacv1.Role:
			roles = append(roles, o)
		case *rbacv1.ClusterRoleBinding:
			clusterRoleBindings = append(clusterRoleBindings, o)
		case *rbacv1.RoleBinding:
			roleBindings = append(roleBindings, o)
		case *appsv1.Deployment:
			if o.Name == operatorName {
				a.podTemplate = *o.Spec.Template.DeepCopy()
			}
		case *corev1.Service:
			a.services = append(a.services, o)
		}
	}
	if a.namespace == nil || a.serviceAccount == nil || len(a.podTemplate.Spec.Containers) == 0 {
		t.Fatalf("artifacts: want a Namespace, a ServiceAccount and a Deployment; got namespace %v, service account %v", a.namespace != nil, a.serviceAccount != nil)
	}
	if a.namespace.Name != artifactNamespace || a.serviceAccount.Namespace != artifactNamespace {
		t.Fatalf("artifacts: the operator's namespace is %q and its ServiceAccount's %q, want %q", a.namespace.Name, a.serviceAccount.Namespace, artifactNamespace)
	}
	for _, b := range clusterRoleBindings {
		if bindsServiceAccount(b.Subjects, a.serviceAccount) {
			if a.clusterRoleBinding != nil {
				t.Fatalf("artifacts: two ClusterRoleBindings grant the operator's ServiceAccount: %s, %s", a.clusterRoleBinding.Name, b.Name)
			}
			a.clusterRoleBinding = b
		}
	}
	for _, b := range roleBindings {
		if bindsServiceAccount(b.Subjects, a.serviceAccount) {
			if a.roleBinding != nil {
				t.Fatalf("artifacts: two RoleBindings grant the operator's ServiceAccount: %s, %s", a.roleBinding.Name, b.Name)
			}
			a.roleBinding = b
		}
	}
	if a.clusterRoleBinding == nil || a.clusterRoleBinding.RoleRef.Kind != "ClusterRole" {
		t.Fatal("artifacts: no ClusterRoleBinding binds a ClusterRole to the operator's ServiceAccount")
	}
	if a.roleBinding == nil || a.roleBinding.RoleRef.Kind != "Role" {
		t.Fatal("artifacts: no RoleBinding binds a Role to the operator's ServiceAccount")
	}
	for _, r := range clusterRoles {
		if r.Name == a.clusterRoleBinding.RoleRef.Name {
			a.clusterRole = r
		}
		if r.Name == crawlerRoleName {
			a.crawlerRole = r
		}
	}
	if a.crawlerRole == nil {
		t.Fatalf("artifacts: no ClusterRole %s (the crawler role)", crawlerRoleName)
	}
	for _, r := range roles {
		if r.Name == a.roleBinding.RoleRef.Name && r.Namespace == a.roleBinding.Namespace {
			a.role = r
		}
	}
	if a.clusterRole == nil || a.role == nil {
		t.Fatalf("artifacts: the bindings name ClusterRole %q and Role %q, not both found", a.clusterRoleBinding.RoleRef.Name, a.roleBinding.RoleRef.Name)
	}
	return a
}

func bindsServiceAccount(subjects []rbacv1.Subject, sa *corev1.ServiceAccount) bool {
	return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
		return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa.Name && s.Namespace == sa.Namespace
	})
}

// decodeFile decodes every YAML document of file; documents holding only
// comments are skipped.
func decodeFile(file string) ([]runtime.Object, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var out []runtime.Object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if isEmptyYAML(doc) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, obj)
	}
}

func isEmptyYAML(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		if s := strings.TrimSpace(string(line)); s != "" && !strings.HasPrefix(s, "#") && s != "---" {
			return false
		}
	}
	return true
}

// installation is where one copy of the artifacts goes: the operator's
// namespace and a suffix for cluster-scoped names. The artifacts themselves
// go to artifactNamespace with no suffix.
type installation struct {
	namespace string
	suffix    string
}

// forInstallation returns a copy of a renamed for in: every object in
// in.namespace, cluster-scoped names suffixed, bindings pointing at the
// renamed roles and ServiceAccount. Rules are untouched.
func (a operatorArtifacts) forInstallation(in installation) operatorArtifacts {
	c := a.deepCopy()
	if in.namespace == artifactNamespace && in.suffix == "" {
		return c
	}
	rename := func(name string) string {
		if in.suffix == "" {
			return name
		}
		return name + "-" + in.suffix
	}
	c.namespace.Name = in.namespace
	c.serviceAccount.Namespace = in.namespace
	c.clusterRole.Name = rename(c.clusterRole.Name)
	c.clusterRoleBinding.Name = rename(c.clusterRoleBinding.Name)
	c.clusterRoleBinding.RoleRef.Name = c.clusterRole.Name
	c.crawlerRole.Name = rename(c.crawlerRole.Name)
	c.role.Namespace = in.namespace
	c.roleBinding.Namespace = in.namespace
	for _, subjects := range [][]rbacv1.Subject{c.clusterRoleBinding.Subjects, c.roleBinding.Subjects} {
		for i := range subjects {
			if subjects[i].Kind == rbacv1.ServiceAccountKind && subjects[i].Name == c.serviceAccount.Name {
				subjects[i].Namespace = in.namespace
			}
		}
	}
	for _, svc := range c.services {
		svc.Namespace = in.namespace
	}
	return c
}

func (a operatorArtifacts) deepCopy() operatorArtifacts {
	c := operatorArtifacts{
		namespace:          a.namespace.DeepCopy(),
		serviceAccount:     a.serviceAccount.DeepCopy(),
		clusterRole:        a.clusterRole.DeepCopy(),
		clusterRoleBinding: a.clusterRoleBinding.DeepCopy(),
		role:               a.role.DeepCopy(),
		roleBinding:        a.roleBinding.DeepCopy(),
		podTemplate:        *a.podTemplate.DeepCopy(),
		crawlerRole:        a.crawlerRole.DeepCopy(),
	}
	for _, svc := range a.services {
		c.services = append(c.services, svc.DeepCopy())
	}
	return c
}

// permission is one verb of one rule of the operator's roles: what the
// minimality test takes away, one at a time.
type permission struct {
	// kind is "ClusterRole" or "Role".
	kind string
	// rule indexes the role's rules.
	rule      int
	apiGroups []string
	resources []string
	verb      string
}

// String reads like RBAC's own messages: "get proxies.crawl.proxyfleet.io".
func (p permission) String() string {
	var names []string
	for _, r := range p.resources {
		for _, g := range p.apiGroups {
			if g == "" {
				names = append(names, r)
			} else {
				names = append(names, r+"."+g)
			}
		}
	}
	s := p.verb + " " + strings.Join(names, ",")
	if p.kind == "Role" {
		s += " (Role)"
	}
	return s
}

// slug names the permission in namespaces: "update-proxies-status".
func (p permission) slug() string {
	return operatortest.DNSName(p.verb + "-" + strings.Join(p.resources, "-"))
}

// permissions lists every (rule, verb) of the operator's roles, in order.
func (a operatorArtifacts) permissions() []permission {
	var out []permission
	add := func(kind string, rules []rbacv1.PolicyRule) {
		for i, r := range rules {
			for _, verb := range r.Verbs {
				out = append(out, permission{kind: kind, rule: i, apiGroups: r.APIGroups, resources: r.Resources, verb: verb})
			}
		}
	}
	add("ClusterRole", a.clusterRole.Rules)
	add("Role", a.role.Rules)
	return out
}

// without returns a copy of a whose role lacks p's verb in p's rule; a rule
// left without verbs is dropped.
func (a operatorArtifacts) without(p permission) operatorArtifacts {
	c := a.deepCopy()
	rules := &c.clusterRole.Rules
	if p.kind == "Role" {
		rules = &c.role.Rules
	}
	r := &(*rules)[p.rule]
	r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == p.verb })
	if len(r.Verbs) == 0 {
		*rules = slices.Delete(*rules, p.rule, p.rule+1)
	}
	return c
}

// apply creates the installation's objects with the admin client.
func (a operatorArtifacts) apply(t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	opts := metav1.CreateOptions{}
	steps := []struct {
		what string
		do   func() error
	}{
		{"Namespace " + a.namespace.Name, func() error { _, err := kube.CoreV1().Namespaces().Create(ctx, a.namespace, opts); return err }},
		{"ServiceAccount", func() error {
			_, err := kube.CoreV1().ServiceAccounts(a.serviceAccount.Namespace).Create(ctx, a.serviceAccount, opts)
			return err
		}},
		{"ClusterRole " + a.clusterRole.Name, func() error { _, err := kube.RbacV1().ClusterRoles().Create(ctx, a.clusterRole, opts); return err }},
		{"ClusterRole " + a.crawlerRole.Name, func() error { _, err := kube.RbacV1().ClusterRoles().Create(ctx, a.crawlerRole, opts); return err }},
		{"ClusterRoleBinding " + a.clusterRoleBinding.Name, func() error {
			_, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, a.clusterRoleBinding, opts)
			return err
		}},
		{"Role", func() error { _, err := kube.RbacV1().Roles(a.role.Namespace).Create(ctx, a.role, opts); return err }},
		{"RoleBinding", func() error {
			_, err := kube.RbacV1().RoleBindings(a.roleBinding.Namespace).Create(ctx, a.roleBinding, opts)
			return err
		}},
	}
	for _, svc := range a.services {
		steps = append(steps, struct {
			what string
			do   func() error
		}{"Service " + svc.Name, func() error { _, err := kube.CoreV1().Services(svc.Namespace).Create(ctx, svc, opts); return err }})
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("applying the artifacts: %s: %v", s.what, err)
		}
	}
}

// placeholderPod is the Deployment's Pod template as a Pod of its own: the
// operator's "own Pod" (--pod-name), which nothing runs.
func (a operatorArtifacts) placeholderPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   a.namespace.Name,
			Labels:      a.podTemplate.Labels,
			Annotations: a.podTemplate.Annotations,
		},
		Spec: a.podTemplate.Spec,
	}
}
