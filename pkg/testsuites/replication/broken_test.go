package replication_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/operatortest"
)

// TestCheckerCatchesABrokenBuild: the history checker is worth only what
// it catches. A build whose followers skip every ban (-tags brokenreplica,
// pkg/lease/replica/brokenreplica.go) runs the same workload; after a few
// leader kills the new leaders have lost their predecessors' cool-downs,
// and the checker must say so.
func TestCheckerCatchesABrokenBuild(t *testing.T) {
	f, stop := startHistory(newGroupOf(t, buildBroken(t), 3))
	f.settle(300)
	for range 3 {
		f.strike(sigkill, -1, 0)
		f.settle(300)
	}

	r := checkHistory(t, stop(), modelConfig(fleetMaxLeases))
	violations := r.Violations()
	if len(violations) == 0 {
		t.Fatal("the checker found nothing wrong with a build whose followers skip bans")
	}
	for _, v := range violations {
		if !strings.HasPrefix(v.Model, "proxies") && !strings.HasPrefix(v.Model, "session state") {
			t.Errorf("a violation of %s: skipping bans loses cool-downs (and the state a ban drops), nothing else", v.Model)
		}
	}
	t.Logf("%d partitions found illegal", len(violations))
}

// buildBroken builds cmd/proxy-operator with the tag brokenreplica (and
// -race when the tests run with it), beside the package's own build.
func buildBroken(t *testing.T) string {
	t.Helper()
	shared.Get(t) // the API server, and the skip under -short
	dir := t.TempDir()
	args := []string{"build", "-tags", "brokenreplica", "-o", dir + "/"}
	if operatortest.RaceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "github.com/proxyfleet/proxy-operator/cmd/proxy-operator")...).CombinedOutput()
	if err != nil {
		t.Fatalf("building the brokenreplica operator: %v\n%s", err, out)
	}
	return filepath.Join(dir, "proxy-operator")
}
