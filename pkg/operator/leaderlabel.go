package operator

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// LeaderLabel marks the leader's Pod; the lease Service selects on it, so
// lease traffic reaches the leader while readiness stays "caches synced" on
// every replica (leader-only readiness would stall rollouts and drains).
const LeaderLabel = "crawl.proxyfleet.io/leader"

// podLabeler sets or clears LeaderLabel on this process's own Pod. It does
// nothing outside a Pod (no POD_NAME), as under `make run`.
type podLabeler struct {
	client    kubernetes.Interface
	namespace string
	name      string
}

func (l podLabeler) enabled() bool { return l.name != "" && l.namespace != "" }

// set writes the label (leader) or removes it (!leader) with a merge patch.
func (l podLabeler) set(ctx context.Context, leader bool) error {
	if !l.enabled() {
		return nil
	}
	var value any // nil removes the label
	if leader {
		value = "true"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LeaderLabel: value}}})
	if err != nil {
		return err
	}
	if _, err := l.client.CoreV1().Pods(l.namespace).Patch(ctx, l.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "proxy-operator"}); err != nil {
		return fmt.Errorf("labelling Pod %s/%s %s=%v: %w", l.namespace, l.name, LeaderLabel, leader, err)
	}
	klog.FromContext(ctx).V(2).Info("Labelled own Pod", "pod", klog.KRef(l.namespace, l.name), "leader", leader)
	return nil
}
