//go:build realnode

package realnode

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// kustomizeInstalls: the second way the README installs, kubectl apply -k of
// the kustomize base, brings up the same three Ready replicas, one leader
// of the lease store with three voters; kubectl delete -k removes it.
func kustomizeInstalls(t *testing.T, s *suite) {
	base := filepath.Join(s.root, "artifacts")
	s.run(t, "kubectl", "apply", "-k", base)
	waitFor(t, 2*time.Minute, "three Ready operator Pods, one leader, three voters", func(ctx context.Context) error {
		pods, ready, leader, err := s.operatorPods(ctx)
		switch {
		case err != nil:
			return err
		case len(pods) != replicas || ready != replicas:
			return fmt.Errorf("%d Pods, %d Ready", len(pods), ready)
		case leader == "":
			return errors.New("no leader yet")
		}
		if _, voters, err := s.raftLeader(ctx); err != nil || voters != replicas {
			return fmt.Errorf("the lease store: %d voters, %v", voters, err)
		}
		return nil
	})
	s.run(t, "kubectl", "delete", "-k", base, "--timeout=90s")
}
