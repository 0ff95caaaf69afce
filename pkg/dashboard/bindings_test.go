package dashboard

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/proxyfleet/proxy-operator/pkg/lease/auth"
)

func roleBinding(ns, name string, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "proxy-viewer"},
		Subjects:   subjects,
	}
}

func sa(ns, name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
}

// RoleBindings names the namespaces whose RoleBindings name a user as RBAC
// matches subjects: by user name, by group, by ServiceAccount (its
// namespace defaulting to the binding's).
func TestRoleBindingsNameTheNamespaces(t *testing.T) {
	kube := fake.NewClientset(
		roleBinding("team-a", "viewer", sa("team-a", "dash")),
		roleBinding("team-b", "viewer", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "dash"}), // team-b's own dash
		roleBinding("team-c", "viewer", sa("team-a", "dash")),
		roleBinding("team-d", "people", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "alice@example.com"}),
		roleBinding("team-e", "group", rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "crawl-admins"}),
		roleBinding("team-f", "odd", rbacv1.Subject{Kind: "Robot", Name: "alice@example.com"}),
	)
	factory := informers.NewSharedInformerFactory(kube, 0)
	bindings, err := NewRoleBindings(factory.Rbac().V1().RoleBindings().Informer())
	if err != nil {
		t.Fatal(err)
	}
	if _, synced := bindings.Namespaces(auth.User{Name: "x"}); synced {
		t.Error("synced before the informer ran")
	}
	ctx, cancel := context.WithCancel(t.Context())
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel() // before Shutdown, which waits for the informers to stop
	factory.WaitForCacheSync(ctx.Done())

	tests := map[string]struct {
		user auth.User
		want []string
	}{
		"a ServiceAccount": {
			user: auth.User{Name: "system:serviceaccount:team-a:dash", Groups: []string{"system:serviceaccounts", "system:authenticated"}},
			want: []string{"team-a", "team-c"},
		},
		"the same name elsewhere": {user: auth.User{Name: "system:serviceaccount:team-b:dash"}, want: []string{"team-b"}},
		"a user and a group":      {user: auth.User{Name: "alice@example.com", Groups: []string{"crawl-admins"}}, want: []string{"team-d", "team-e"}},
		"bound nowhere":           {user: auth.User{Name: "system:serviceaccount:team-z:nobody", Groups: []string{"system:authenticated"}}, want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, synced := bindings.Namespaces(tc.user)
			if !synced {
				t.Fatal("not synced")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("namespaces (-want +got):\n%s", diff)
			}
		})
	}
}

// The cache keeps a binding's name and fixed-size keys of at most
// maxBindingSubjects subjects: a tenant's binding of huge names costs a
// few KiB, and the subjects it cut see nothing through it.
func TestCachedRoleBindingIsBounded(t *testing.T) {
	var subjects []rbacv1.Subject
	for i := range maxBindingSubjects + 10 {
		subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.UserKind, Name: fmt.Sprintf("%d-%s", i, strings.Repeat("x", 1000))})
	}
	rb := roleBinding("t", "huge", subjects...)
	rb.Annotations = map[string]string{"pad": strings.Repeat("p", 100000)}
	obj, err := cachedRoleBinding(rb)
	if err != nil {
		t.Fatal(err)
	}
	b := obj.(*boundSubjects)
	if len(b.Keys) != maxBindingSubjects || b.Annotations != nil || b.Name != "huge" || b.Namespace != "t" {
		t.Errorf("kept %d keys, annotations %d, %s/%s", len(b.Keys), len(b.Annotations), b.Namespace, b.Name)
	}
	size := 0
	for _, k := range b.Keys {
		size += len(k)
	}
	if size > 40*maxBindingSubjects {
		t.Errorf("the keys take %d bytes", size)
	}
	if copied := b.DeepCopyObject().(*boundSubjects); &copied.Keys[0] == &b.Keys[0] {
		t.Error("DeepCopyObject shares the keys")
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "t/huge", Obj: rb}
	if got, _ := cachedRoleBinding(tomb); got != any(tomb) {
		t.Error("a tombstone was changed")
	}
}
