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
// the kustomize base, brings up the same two Ready replicas and one leader;
// kubectl delete -k removes it.
func kustomizeInstalls(t *testing.T, s *suite) {
	base := filepath.Join(s.root, "artifacts")
	s.run(t, "kubectl", "apply", "-k", base)
	waitFor(t, 2*time.Minute, "two Ready operator Pods and one leader", func(ctx context.Context) error {
		pods, ready, leader, err := s.operatorPods(ctx)
		switch {
		case err != nil:
			return err
		case len(pods) != 2 || ready != 2:
			return fmt.Errorf("%d Pods, %d Ready", len(pods), ready)
		case leader == "":
			return errors.New("no leader yet")
		}
		return nil
	})
	s.run(t, "kubectl", "delete", "-k", base, "--timeout=90s")
}
