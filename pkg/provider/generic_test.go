package provider

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// genericPackages are the packages that must name no provider: they ask a
// Set (hooks.go) what a Proxy's provider differs in
// (docs/decisions/0250-providers-own-their-quirks.md).
var genericPackages = []string{"../controller", "../pool", "../health"}

// apiTypes is where the API declares its provider names, the constants
// of type ProviderName (crawlv1alpha1.ProviderUpstream, ...).
const apiTypes = "../apis/crawl/v1alpha1/types.go"

// providerConstants reads the names of the API's provider constants, so
// that a new provider is looked for without a list to keep here.
func providerConstants(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), apiTypes, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			v := spec.(*ast.ValueSpec)
			if typ, ok := v.Type.(*ast.Ident); ok && typ.Name == "ProviderName" {
				for _, name := range v.Names {
					names[name.Name] = true
				}
			}
		}
	}
	if !names["ProviderKubernetes"] || !names["ProviderAzure"] {
		t.Fatalf("%s: provider constants %v miss ProviderKubernetes or ProviderAzure: the reading is broken", apiTypes, names)
	}
	return names
}

// TestGenericCodeNamesNoProvider reads the production files of the generic
// packages: no import of a provider implementation, no provider constant,
// no spec.upstream field, no identifier or string about upstream sessions.
// Comments are not read: "upstream" as in "the proxy a probe goes through"
// is a word, not a branch. hashedSpec's per-provider spec blocks are the
// spec's shape and are not looked for.
func TestGenericCodeNamesNoProvider(t *testing.T) {
	const implementations = "github.com/proxyfleet/proxy-operator/pkg/provider/"
	providerConstant := providerConstants(t)
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
				t.Errorf("%s names a provider: %s; ask the provider.Set instead", fset.Position(n.Pos()), what)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ImportSpec:
					if p, _ := strconv.Unquote(n.Path.Value); strings.HasPrefix(p, implementations) {
						complain(n, "imports "+p)
					}
					return false // its path is no string to look into
				case *ast.Ident:
					if providerConstant[n.Name] || strings.Contains(strings.ToLower(n.Name), "upstream") {
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
