package gateway_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// leaseStore is the package the gateway must not link in, nor its tests
// import: it reaches leases over HTTP only, in the lease client's terms
// (issue 61).
const leaseStore = "github.com/proxyfleet/proxy-operator/pkg/lease/store"

// TestGatewayDependsOnNoLeaseStore checks, with the go command as the
// store's TestStoreDependsOnNoNetworkOrClientGo does (not under -short: it
// starts one), that the gateway links in nothing of the lease store, the
// lease client included, and that its test files do not import it either
// (they reach an in-process store through pkg/testing/leaseapitest).
func TestGatewayDependsOnNoLeaseStore(t *testing.T) {
	integration.Needs(t, "the go command, to list the gateway's dependencies")
	out, err := exec.Command("go", "list", "-f",
		`{{range .Deps}}{{.}} dep{{"\n"}}{{end}}{{range .TestImports}}{{.}} test-import{{"\n"}}{{end}}{{range .XTestImports}}{{.}} external-test-import{{"\n"}}{{end}}`,
		".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, how, _ := strings.Cut(line, " ")
		if how == "dep" {
			deps++
		}
		if pkg == leaseStore || strings.HasPrefix(pkg, leaseStore+"/") {
			t.Errorf("the gateway's %s includes %s", how, pkg)
		}
	}
	if deps == 0 {
		t.Fatalf("go list named no dependency of the gateway:\n%s", out)
	}
}
