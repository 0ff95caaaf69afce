package failover

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/proxyfleet/proxy-operator/pkg/lease/replica"
)

// The keys of the peers' CA in its Secret.
const (
	PeerCACertKey = "ca.crt"
	PeerCAKeyKey  = "ca.key"
)

// EnsurePeerCA returns the CA the replicas' peer port trusts, from the
// Secret namespace/name, creating it if it does not exist (the first
// replica to start wins; the others read its CA). Only the replicas may
// read that Secret: its key lets a peer vouch for any caller's identity.
func EnsurePeerCA(ctx context.Context, client kubernetes.Interface, namespace, name string) (replica.CA, error) {
	secrets := client.CoreV1().Secrets(namespace)
	for range 2 {
		secret, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			ca, err := replica.ParseCA(secret.Data[PeerCACertKey], secret.Data[PeerCAKeyKey])
			if err != nil {
				return replica.CA{}, fmt.Errorf("Secret %s/%s: %w", namespace, name, err)
			}
			return ca, nil
		}
		if !apierrors.IsNotFound(err) {
			return replica.CA{}, fmt.Errorf("peers CA: Secret %s/%s: %w", namespace, name, err)
		}
		ca, err := replica.NewCA(time.Now())
		if err != nil {
			return replica.CA{}, err
		}
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{PeerCACertKey: ca.CertPEM, PeerCAKeyKey: ca.KeyPEM},
		}
		if _, err = secrets.Create(ctx, secret, metav1.CreateOptions{}); err == nil {
			return ca, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return replica.CA{}, fmt.Errorf("peers CA: creating Secret %s/%s: %w", namespace, name, err)
		}
	}
	return replica.CA{}, fmt.Errorf("peers CA: Secret %s/%s keeps appearing and vanishing", namespace, name)
}
