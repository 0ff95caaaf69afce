package v1alpha1_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

// env is the real etcd + kube-apiserver shared by this package's tests.
var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

// newNamespace creates a namespace of the test's own, so tests never see each
// other's objects (namespaces are not garbage-collected here: no
// controller-manager, so it is left behind with the test environment).
func newNamespace(t *testing.T) string {
	env := apiServer.Get(t)
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: dnsName(t.Name())[:min(40, len(dnsName(t.Name())))] + "-"}}
	created, err := kubernetes.NewForConfigOrDie(env.Config).CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return created.Name
}

var notDNS = regexp.MustCompile(`[^a-z0-9]+`)

// dnsName turns a test name into a valid object name.
func dnsName(s string) string {
	n := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	return n
}
