package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

// The store's shape (issue 61), checked on its source with go/types so
// that it stays as docs/decisions/0370-lease-store-components-and-effects.md
// says: few functions reach the store's own state, in few files; the
// policies neither hold nor receive it; the package is pure.

// stateTypes hold the store's own state: the Store and the state it guards.
var stateTypes = []string{"Store", "state"}

const (
	maxStateFuncs = 50
	maxStateFiles = 6
)

// loadStore type-checks the package's non-test files. Imports are not
// loaded (that would start the go command): they come back as empty
// packages and the errors about them are ignored, which leaves the
// package's own types whole.
func loadStore(t *testing.T) (*token.FileSet, []*ast.File, *types.Info, *types.Package) {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}, Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: emptyImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check("github.com/proxyfleet/proxy-operator/pkg/lease/store", fset, files, info)
	return fset, files, info, pkg
}

type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	if path == "unsafe" {
		return types.Unsafe, nil
	}
	name := path[strings.LastIndex(path, "/")+1:]
	if v, err := strconv.Atoi(strings.TrimPrefix(name, "v")); err == nil && v > 1 { // ".../rand/v2"
		name = strings.Split(path, "/")[len(strings.Split(path, "/"))-2]
	}
	p := types.NewPackage(path, name)
	p.MarkComplete()
	return p, nil
}

// holdsState says whether t is (a pointer to) one of stateTypes.
func holdsState(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	return ok && slices.Contains(stateTypes, n.Obj().Name())
}

func TestFewFunctionsReachTheStoresState(t *testing.T) {
	fset, files, info, _ := loadStore(t)
	var takes, reach []string
	perFile := map[string]int{}
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			sig := info.Defs[fn.Name].Type().(*types.Signature)
			held := sig.Recv() != nil && holdsState(sig.Recv().Type())
			for v := range sig.Params().Variables() {
				held = held || holdsState(v.Type())
			}
			if !held {
				continue
			}
			name := filepath.Base(fset.Position(fn.Pos()).Filename) + ":" + fn.Name.Name
			takes = append(takes, name)
			if touchesState(fn.Body, info) {
				reach = append(reach, name)
				perFile[filepath.Base(fset.Position(fn.Pos()).Filename)]++
			}
		}
	}
	slices.Sort(reach)
	t.Logf("%d functions and methods take the Store or its state; %d of them reach the state, in %d files: %s",
		len(takes), len(reach), len(perFile), strings.Join(reach, " "))
	if len(reach) > maxStateFuncs {
		t.Errorf("%d functions and methods reach the store's own state; at most %d", len(reach), maxStateFuncs)
	}
	if len(perFile) > maxStateFiles {
		t.Errorf("they are in %d files; at most %d", len(perFile), maxStateFiles)
	}
}

// touchesState says whether body selects a field of the state, or the
// Store's state or lock.
func touchesState(body *ast.BlockStmt, info *types.Info) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || found {
			return !found
		}
		v, ok := info.Uses[sel.Sel].(*types.Var)
		if !ok || !v.IsField() {
			return true
		}
		if x, ok := info.Types[sel.X]; ok && holdsState(x.Type) {
			found = v.Name() == "st" || v.Name() == "mu" || isStateType(x.Type)
		}
		return !found
	})
	return found
}

func isStateType(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := t.(*types.Named)
	return ok && n.Obj().Name() == "state"
}

// TestPoliciesNeitherHoldNorReceiveTheStore: no type but the state types
// has a field that holds them, and no method of another type takes them.
func TestPoliciesNeitherHoldNorReceiveTheStore(t *testing.T) {
	_, _, _, pkg := loadStore(t)
	var problems []string
	for _, name := range pkg.Scope().Names() {
		tn, ok := pkg.Scope().Lookup(name).(*types.TypeName)
		if !ok || slices.Contains(stateTypes, name) {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok {
			continue
		}
		if st, ok := named.Underlying().(*types.Struct); ok {
			for f := range st.Fields() {
				if holdsState(f.Type()) {
					problems = append(problems, name+"."+f.Name()+" holds "+f.Type().String())
				}
			}
		}
		for m := range named.Methods() {
			for v := range m.Signature().Params().Variables() {
				if holdsState(v.Type()) {
					problems = append(problems, name+"."+m.Name()+" takes "+v.Type().String())
				}
			}
		}
	}
	if len(problems) > 0 {
		t.Errorf("the policies and helpers must neither hold nor receive the store:\n%s", strings.Join(problems, "\n"))
	}
}

// allowedImports are what the store may import: no I/O, no client-go, no
// net/http (docs/architecture.md: the store is pure and clock-injected).
var allowedImports = []string{
	"bytes", "cmp", "container/heap", "container/list", "context", "crypto/hmac", "crypto/sha256", "encoding/base64",
	"encoding/binary", "errors", "fmt", "hash", "io", "maps", "math", "slices", "strings", "sync", "sync/atomic", "time",
	"k8s.io/apimachinery/pkg/labels", "k8s.io/apimachinery/pkg/types", "k8s.io/utils/clock",
	"github.com/proxyfleet/proxy-operator/pkg/hostrule", "github.com/proxyfleet/proxy-operator/pkg/tier",
	// The API's vocabulary (a country code's spelling): types, no I/O.
	"github.com/proxyfleet/proxy-operator/pkg/lease/wire",
}

// TestStoreIsPure: the store imports only what allowedImports lists and
// reads no clock but its own: no time.Now, time.Since, time.Until, no
// timers of the time package and no randomness.
func TestStoreIsPure(t *testing.T) {
	fset, files, info, _ := loadStore(t)
	var problems []string
	for _, f := range files {
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !slices.Contains(allowedImports, path) {
				problems = append(problems, fset.Position(imp.Pos()).String()+": imports "+path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if obj := info.Uses[sel.Sel]; obj != nil && obj.Pkg() != nil && obj.Pkg().Path() == "time" &&
				slices.Contains([]string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"}, obj.Name()) {
				problems = append(problems, fset.Position(sel.Pos()).String()+": time."+obj.Name())
			}
			return true
		})
	}
	if len(problems) > 0 {
		t.Errorf("the store must stay pure (no I/O, no clock but Config.Clock):\n%s", strings.Join(problems, "\n"))
	}
}

// TestStoreDependsOnNoNetworkOrClientGo checks what the store links in,
// transitively, with the go command (not under -short: it starts one).
func TestStoreDependsOnNoNetworkOrClientGo(t *testing.T) {
	integration.Needs(t, "the go command, to list the store's dependencies")
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		// "net" comes with apimachinery's label validation (IP literals); no
		// package that talks to anyone does.
		if dep == "net/http" || strings.HasPrefix(dep, "k8s.io/client-go") || dep == "os/exec" {
			t.Errorf("the store depends on %s", dep)
		}
	}
}
