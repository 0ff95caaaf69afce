package failover

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// t0 is a time for the tests' horizons.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// withOptimisticConcurrency makes the fake client refuse ConfigMap updates
// with a stale resourceVersion, as the API server does (the fake's tracker
// does not).
func withOptimisticConcurrency(client *kubefake.Clientset) *kubefake.Clientset {
	client.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		stored, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), cm.Namespace, cm.Name)
		if err != nil {
			return true, nil, err
		}
		current := stored.(*corev1.ConfigMap).ResourceVersion
		if cm.ResourceVersion != current {
			return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), cm.Name, errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(current)
		cm = cm.DeepCopy()
		cm.ResourceVersion = strconv.Itoa(n + 1)
		return true, cm, client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), cm, cm.Namespace)
	})
	return client
}

func TestConfigMapHorizonFences(t *testing.T) {
	ctx := context.Background()
	client := withOptimisticConcurrency(kubefake.NewClientset())
	a := NewConfigMapHorizon(client, "ops", "lease-horizon", "a")
	b := NewConfigMapHorizon(client, "ops", "lease-horizon", "b")

	if err := a.Save(ctx, t0); err == nil {
		t.Error("Save before Claim: no error")
	}
	got, err := a.Claim(ctx)
	if err != nil || !got.IsZero() {
		t.Fatalf("first Claim = %v, %v; want zero (nothing persisted)", got, err)
	}
	horizon := t0.Add(90 * time.Second)
	if err := a.Save(ctx, horizon); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(ctx, horizon.Add(time.Second)); err != nil {
		t.Fatalf("second Save: %v", err)
	}
	got, err = b.Claim(ctx)
	if err != nil || !got.Equal(horizon.Add(time.Second)) {
		t.Fatalf("b's Claim = %v, %v; want a's horizon %v", got, err, horizon.Add(time.Second))
	}
	// a is fenced off.
	if err := a.Save(ctx, horizon.Add(time.Hour)); !errors.Is(err, ErrHorizonLost) {
		t.Errorf("a's Save after b claimed: err = %v, want ErrHorizonLost", err)
	}
	if err := b.Save(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps("ops").Get(ctx, "lease-horizon", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[horizonDataKey] != "" || cm.Data[horizonHolderKey] != "b" {
		t.Errorf("ConfigMap data %v, want an empty horizon held by b", cm.Data)
	}
}

func TestConfigMapHorizonUnreadable(t *testing.T) {
	ctx := context.Background()
	client := withOptimisticConcurrency(kubefake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "wm"},
		Data:       map[string]string{horizonDataKey: "yesterday"},
	}))
	w := NewConfigMapHorizon(client, "ops", "wm", "a")
	if _, err := w.Claim(ctx); !errors.Is(err, ErrHorizonUnknown) {
		t.Fatalf("Claim: err = %v, want ErrHorizonUnknown", err)
	}
	// Claimed all the same.
	if err := w.Save(ctx, t0); err != nil {
		t.Errorf("Save after claiming an unreadable horizon: %v", err)
	}
}

func TestEnsureKey(t *testing.T) {
	ctx := context.Background()
	client := kubefake.NewClientset()
	first, err := EnsureKey(ctx, client, "ops", "lease-key")
	if err != nil || len(first) < store.MinKeyLen {
		t.Fatalf("EnsureKey created %d bytes, %v", len(first), err)
	}
	second, err := EnsureKey(ctx, client, "ops", "lease-key")
	if err != nil || !bytes.Equal(first, second) {
		t.Errorf("second EnsureKey returned another key (%v)", err)
	}
	short := kubefake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "lease-key"},
		Data:       map[string][]byte{KeySecretKey: []byte("short")},
	})
	if _, err := EnsureKey(ctx, short, "ops", "lease-key"); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("a short key: err = %v, want an error that does not show the key", err)
	}
}
