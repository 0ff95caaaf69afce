package provider

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// genericPackages are the packages that must name no provider: they ask a
// Set (hooks.go) what a Proxy's provider differs in
// (docs/decisions/0250-providers-own-their-quirks.md).
var genericPackages = []string{"../controller", "../pool", "../health"}

// TestGenericCodeNamesNoProvider reads the production files of the generic
// packages: no import of a provider implementation, no provider constant
// (every crawlv1alpha1.ProviderName the API declares), no provider block of
// the spec (spec.gce, ...: the spec hash gets them from the registry), no
// identifier or string about upstream sessions. Comments are not read:
// "upstream" as in "the proxy a probe goes through" is a word, not a
// branch.
func TestGenericCodeNamesNoProvider(t *testing.T) {
	const implementations = "github.com/proxyfleet/proxy-operator/pkg/provider/"
	providerConstants, blocks := providerConstants(t), providerBlocks()
	for _, dir := range genericPackages {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			complain := func(n ast.Node, what string) {
				t.Errorf("%s names a provider: %s; ask the provider.Set, or derive it from the provider.Registry, instead", fset.Position(n.Pos()), what)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ImportSpec:
					if p, _ := strconv.Unquote(n.Path.Value); strings.HasPrefix(p, implementations) {
						complain(n, "imports "+p)
					}
					return false // its path is no string to look into
				case *ast.SelectorExpr:
					if blocks[n.Sel.Name] {
						complain(n, "the spec's provider block ."+n.Sel.Name)
					}
				case *ast.Ident:
					if providerConstants[n.Name] || strings.Contains(strings.ToLower(n.Name), "upstream") {
						complain(n, n.Name)
					}
				case *ast.BasicLit:
					if n.Kind == token.STRING && strings.Contains(strings.ToLower(n.Value), "upstream") {
						complain(n, n.Value)
					}
				}
				return true
			})
		}
	}
}

// providerConstants are the names of the API's provider constants (the
// constants of type ProviderName in types.go), so that a new provider is
// looked for without a change here.
func providerConstants(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "apis", "crawl", "v1alpha1", "types.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, decl := range f.Decls {
		if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.CONST {
			for _, spec := range gen.Specs {
				if v := spec.(*ast.ValueSpec); isIdent(v.Type, "ProviderName") {
					for _, name := range v.Names {
						names[name.Name] = true
					}
				}
			}
		}
	}
	if len(names) < 2 {
		t.Fatalf("found the provider constants %v in types.go: the test no longer recognises them", names)
	}
	return names
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// providerBlocks are the Go names of the Proxy spec's provider blocks (its
// fields of type *<X>Provider).
func providerBlocks() map[string]bool {
	names := map[string]bool{}
	for f := range reflect.TypeFor[crawlv1alpha1.ProxySpec]().Fields() {
		if f.Type.Kind() == reflect.Pointer && strings.HasSuffix(f.Type.Elem().Name(), "Provider") {
			names[f.Name] = true
		}
	}
	return names
}
