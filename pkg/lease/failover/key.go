package failover

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/lease/store"
)

// KeySecretKey is the key of the lease ID key in its Secret.
const KeySecretKey = "key"

// EnsureKey returns the key that signs lease IDs, from the Secret
// namespace/name, creating the Secret with a random key if it does not exist
// (the first replica to start wins; the others read its key). Every replica
// must use the same key, or a new leader cannot re-learn the leases of the
// old one. The operator needs get and create on that Secret.
func EnsureKey(ctx context.Context, client kubernetes.Interface, namespace, name string) ([]byte, error) {
	secrets := client.CoreV1().Secrets(namespace)
	for range 2 {
		secret, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			key := secret.Data[KeySecretKey]
			if len(key) < store.MinKeyLen {
				return nil, fmt.Errorf("lease ID key: Secret %s/%s: key %q has %d bytes, want at least %d", namespace, name, KeySecretKey, len(key), store.MinKeyLen)
			}
			return key, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("lease ID key: Secret %s/%s: %w", namespace, name, err)
		}
		key := make([]byte, store.MinKeyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("lease ID key: %w", err)
		}
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{KeySecretKey: key},
		}
		_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
		if err == nil {
			return key, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("lease ID key: creating Secret %s/%s: %w", namespace, name, err)
		}
		// Another replica created it first: read theirs.
	}
	return nil, fmt.Errorf("lease ID key: Secret %s/%s keeps appearing and vanishing", namespace, name)
}
