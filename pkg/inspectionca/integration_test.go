package inspectionca_test

// The controller against the real API server (pkg/testing/testenv): a
// namespace that opts in gets a CA Secret in the operator's namespace and
// a bundle in its own; a rotation publishes both CAs; leaving removes
// both; a namespace that did not opt in gets nothing.

import (
	"context"
	"encoding/pem"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/proxyfleet/proxy-operator/pkg/inspection"
	"github.com/proxyfleet/proxy-operator/pkg/inspectionca"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/testenv"
)

var apiServer = testenv.NewShared(testenv.Options{})

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }

func newNamespace(t *testing.T, kube kubernetes.Interface, labels map[string]string) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ca-", Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func TestInspectedNamespacesGetACAAndLoseIt(t *testing.T) {
	env := apiServer.Get(t)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	operatorNS := newNamespace(t, kube, nil)
	optIn := map[string]string{inspection.NamespaceLabel: inspection.NamespaceLabelValue}
	inspected := newNamespace(t, kube, optIn)
	other := newNamespace(t, kube, nil)

	clock := clocktesting.NewFakeClock(time.Now())
	inf := inspectionca.NewInformers(kube, operatorNS)
	recorder := record.NewFakeRecorder(100)
	c, err := inspectionca.New(inspectionca.Config{
		Kube: kube, Namespaces: inf.Namespaces.Core().V1().Namespaces(), Secrets: inf.Secrets.Core().V1().Secrets(),
		ConfigMaps: inf.Bundles.Core().V1().ConfigMaps(), OperatorNamespace: operatorNS,
		Validity: 100 * 24 * time.Hour, RotateBefore: 30 * 24 * time.Hour, Recorder: recorder, Clock: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range inf.All() {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	bundle := func() (string, error) {
		cm, err := kube.CoreV1().ConfigMaps(inspected).Get(ctx, inspection.BundleConfigMap, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return cm.Data[inspection.BundleKey], nil
	}
	secret := func() (inspection.CASet, error) {
		s, err := kube.CoreV1().Secrets(operatorNS).Get(ctx, inspection.SecretName(inspected), metav1.GetOptions{})
		if err != nil {
			return inspection.CASet{}, err
		}
		return inspection.ParseSecretData(s.Data)
	}
	var first inspection.CASet
	eventually.Check(t, 20*time.Second, 50*time.Millisecond, "a CA issued and published", eventually.Holds(func() (bool, string) {
		set, err := secret()
		if err != nil {
			return false, err.Error()
		}
		got, err := bundle()
		first = set
		return err == nil && got == string(set.Current.CertPEM()), fmt.Sprintf("bundle %q, %v", got, err)
	}))
	if got, _ := bundle(); strings.Contains(got, "PRIVATE KEY") {
		t.Error("the tenant's bundle holds a private key")
	}
	if !strings.Contains(first.Current.Cert.Subject.CommonName, inspected) {
		t.Errorf("CA %q does not name its namespace", first.Current.Cert.Subject.CommonName)
	}
	for _, ns := range []string{other, operatorNS} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, inspection.BundleConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace %s, not opted in, has a bundle (%v)", ns, err)
		}
		if _, err := kube.CoreV1().Secrets(operatorNS).Get(ctx, inspection.SecretName(ns), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace %s, not opted in, has a CA (%v)", ns, err)
		}
	}

	// Seventy days on: the CA is a month from its end. A change to the
	// namespace brings it to the controller, which rotates it.
	clock.Step(70 * 24 * time.Hour)
	touch(t, kube, inspected, func(ns *corev1.Namespace) { ns.Annotations = map[string]string{"touched": "1"} })
	eventually.Check(t, 20*time.Second, 50*time.Millisecond, "rotated, both published", eventually.Holds(func() (bool, string) {
		set, err := secret()
		if err != nil || set.Previous == nil {
			return false, fmt.Sprintf("%v, previous %v", err, set.Previous)
		}
		got, _ := bundle()
		return set.Previous.Equal(first.Current.Cert) && certificates(got) == 2 && strings.HasPrefix(got, string(set.Current.CertPEM())),
			fmt.Sprintf("%d certificates published", certificates(got))
	}))

	// Leaving inspection removes both.
	touch(t, kube, inspected, func(ns *corev1.Namespace) { delete(ns.Labels, inspection.NamespaceLabel) })
	eventually.Check(t, 20*time.Second, 50*time.Millisecond, "CA and bundle gone", eventually.Holds(func() (bool, string) {
		_, errSecret := secret()
		_, errBundle := bundle()
		return apierrors.IsNotFound(errSecret) && apierrors.IsNotFound(errBundle), fmt.Sprintf("%v / %v", errSecret, errBundle)
	}))
	var reasons []string
	for len(recorder.Events) > 0 {
		e := <-recorder.Events
		reasons = append(reasons, strings.Fields(e)[1])
		if strings.Contains(e, "PRIVATE KEY") {
			t.Errorf("an event holds a key: %s", e)
		}
	}
	if want := []string{inspectionca.ReasonCAIssued, inspectionca.ReasonCARotated, inspectionca.ReasonCARemoved}; strings.Join(reasons, ",") != strings.Join(want, ",") {
		t.Errorf("events %v, want %v", reasons, want)
	}
}

func touch(t *testing.T, kube kubernetes.Interface, name string, change func(*corev1.Namespace)) {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(ns)
	if _, err := kube.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func certificates(bundle string) int {
	n := 0
	for rest := []byte(bundle); ; n++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return n
		}
	}
}
