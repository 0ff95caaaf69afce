package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// HorizonStore persists a leader's horizon: a time that no lease it granted
// or renewed expires after. A new leader reads its predecessors' horizon and
// knows when their last lease has expired, so it need not wait the maximum
// TTL after a crash. Claiming fences the predecessors off: after a Claim,
// their Saves fail, so no predecessor can raise the horizon behind the new
// leader's back.
type HorizonStore interface {
	// Claim takes the persisted horizon over for a new term and returns the horizon
	// its predecessors persisted (zero: none ever did, or the last one left
	// with no live leases).
	Claim(ctx context.Context) (time.Time, error)
	// Save persists t as the horizon of the claimed term. It fails with
	// ErrHorizonLost once another replica has claimed the horizon.
	Save(ctx context.Context, t time.Time) error
}

// ErrHorizonLost: another replica claimed the horizon since this one did.
var ErrHorizonLost = errors.New("the lease horizon was claimed by another replica")

// ErrHorizonUnknown: the claim succeeded, but the stored horizon could not
// be read; the new leader must assume the worst (the maximum TTL).
var ErrHorizonUnknown = errors.New("the stored lease horizon is unreadable")

// The keys of the horizon ConfigMap.
const (
	horizonDataKey   = "horizon"
	horizonHolderKey = "holder"
)

// ConfigMapHorizon keeps the horizon in a ConfigMap; its resourceVersion
// is the fence. The operator needs get, create and update on configmaps in
// its namespace.
type ConfigMapHorizon struct {
	client    kubernetes.Interface
	namespace string
	name      string
	identity  string

	mu sync.Mutex
	// claimed is our last write, with the resourceVersion it got; nil
	// before Claim.
	claimed *corev1.ConfigMap
}

// NewConfigMapHorizon keeps the horizon in namespace/name; identity
// (this replica's leader-election identity) is recorded for humans.
func NewConfigMapHorizon(client kubernetes.Interface, namespace, name, identity string) *ConfigMapHorizon {
	return &ConfigMapHorizon{client: client, namespace: namespace, name: name, identity: identity}
}

// Claim reads the horizon and writes it back under our name, retrying when
// another writer gets in between.
func (w *ConfigMapHorizon) Claim(ctx context.Context) (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cms := w.client.CoreV1().ConfigMaps(w.namespace)
	for {
		cm, err := cms.Get(ctx, w.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cm = &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: w.namespace, Name: w.name},
				Data:       map[string]string{horizonDataKey: "", horizonHolderKey: w.identity},
			}
			created, err := cms.Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return time.Time{}, fmt.Errorf("lease horizon %s/%s: %w", w.namespace, w.name, err)
			}
			w.claimed = created
			return time.Time{}, nil
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("lease horizon %s/%s: %w", w.namespace, w.name, err)
		}
		// An unreadable horizon is claimed all the same (the fence matters
		// more than the value) and reported, so that the caller assumes the worst.
		horizon, parseErr := parseHorizon(cm.Data[horizonDataKey])
		cm = cm.DeepCopy()
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[horizonHolderKey] = w.identity
		updated, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("lease horizon %s/%s: %w", w.namespace, w.name, err)
		}
		w.claimed = updated
		if parseErr != nil {
			return time.Time{}, fmt.Errorf("lease horizon %s/%s: %w: %w", w.namespace, w.name, ErrHorizonUnknown, parseErr)
		}
		return horizon, nil
	}
}

// Save writes t under the resourceVersion of our last write.
func (w *ConfigMapHorizon) Save(ctx context.Context, t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.claimed == nil {
		return fmt.Errorf("lease horizon %s/%s: saving before claiming", w.namespace, w.name)
	}
	cm := w.claimed.DeepCopy()
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[horizonDataKey] = formatHorizon(t)
	updated, err := w.client.CoreV1().ConfigMaps(w.namespace).Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("lease horizon %s/%s: %w", w.namespace, w.name, ErrHorizonLost)
	}
	if err != nil {
		return fmt.Errorf("lease horizon %s/%s: %w", w.namespace, w.name, err)
	}
	w.claimed = updated
	return nil
}

func formatHorizon(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func parseHorizon(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("malformed %s %q: %w", horizonDataKey, s, err)
	}
	return t, nil
}

// MemoryHorizon keeps the horizon in memory, for tests and examples that
// run one replica in one process. A restarted process forgets it and so does
// not wait for its previous run's leases: never use it in the operator.
type MemoryHorizon struct {
	mu      sync.Mutex
	horizon time.Time
}

// Claim returns the horizon saved last.
func (w *MemoryHorizon) Claim(context.Context) (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.horizon, nil
}

// Save keeps t.
func (w *MemoryHorizon) Save(_ context.Context, t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.horizon = t
	return nil
}
