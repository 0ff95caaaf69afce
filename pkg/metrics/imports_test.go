package metrics

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The packages of this module that pkg/metrics may import: the API's types
// and listers, and the provider contract (its error classes label
// provider_errors_total). The packages it measures report to it through
// interfaces of their own and pass their label values in (Labels), so that
// the dependencies point down (docs/decisions/0251-dependencies-point-down.md).
var allowedImports = []string{
	"github.com/proxyfleet/proxy-operator/pkg/apis/",
	"github.com/proxyfleet/proxy-operator/pkg/generated/",
	"github.com/proxyfleet/proxy-operator/pkg/provider",
}

func TestImportsNoMeasuredPackage(t *testing.T) {
	const module = "github.com/proxyfleet/proxy-operator/"
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(path, module) && !allowed(path) {
				t.Errorf("%s imports %s: pass what it needs in instead (Labels), so that metrics sits below the packages it measures", name, path)
			}
		}
	}
	if files == 0 {
		t.Fatal("no production files found: the test runs in the wrong directory")
	}
}

func allowed(path string) bool {
	for _, a := range allowedImports {
		if path == a || (strings.HasSuffix(a, "/") && strings.HasPrefix(path, a)) {
			return true
		}
	}
	return false
}
