package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The README's Layout is the one list of the tree's parts: each path a row
// names exists, with the subdirectories its text names (`store/`, a
// backquoted name ending in a slash), and every directory under pkg/ has a
// row of its own or sits under one that names a deeper path
// (`pkg/apis/crawl/v1alpha1`). A new package comes with its row; a removed
// one takes its row along.
func TestReadmeLayoutNamesWhatExists(t *testing.T) {
	rows := layoutRows(t, readFile(t, filepath.Join("..", "README.md")))
	for _, r := range rows {
		if _, err := os.Stat(filepath.Join("..", r.path)); err != nil {
			t.Errorf("README.md Layout row %q names a path that does not exist", r.path)
			continue
		}
		for _, sub := range r.subdirs {
			if info, err := os.Stat(filepath.Join("..", r.path, sub)); err != nil || !info.IsDir() {
				t.Errorf("README.md Layout row %q names `%s/`, which is no directory of %s", r.path, sub, r.path)
			}
		}
	}
	entries, err := os.ReadDir(filepath.Join("..", "pkg"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, r := range rows {
		if rest, ok := strings.CutPrefix(r.path, "pkg/"); ok {
			top, _, _ := strings.Cut(rest, "/")
			named[top] = true
		}
	}
	for _, e := range entries {
		if e.IsDir() && !named[e.Name()] {
			t.Errorf("pkg/%s has no row in README.md's Layout: add one saying what it is", e.Name())
		}
	}
}

// layoutRow is one row of the README's Layout table.
type layoutRow struct {
	path    string   // the first cell, without backquotes or a trailing slash
	subdirs []string // backquoted names ending in a slash in the second cell
}

var (
	layoutPath   = regexp.MustCompile("^\\| `([^`]+)` \\|(.*)\\|$")
	layoutSubdir = regexp.MustCompile("`([a-z0-9][a-z0-9._/-]*)/`")
)

// layoutRows reads the table of the README's "## Layout" section.
func layoutRows(t *testing.T, readme string) []layoutRow {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Layout\n")
	if !ok {
		t.Fatal(`README.md has no "## Layout" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []layoutRow
	for _, line := range strings.Split(section, "\n") {
		m := layoutPath.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		r := layoutRow{path: strings.TrimSuffix(m[1], "/")}
		for _, sub := range layoutSubdir.FindAllStringSubmatch(m[2], -1) {
			r.subdirs = append(r.subdirs, sub[1])
		}
		rows = append(rows, r)
	}
	if len(rows) < 10 {
		t.Fatalf("README.md's Layout has %d rows: the table is not where the test looks", len(rows))
	}
	return rows
}

func TestLayoutRowsReadsPathsAndSubdirectories(t *testing.T) {
	readme := strings.Join([]string{
		"# x", "", "## Layout", "",
		"| path | what |", "|---|---|",
		"| `pkg/lease` | the lease API: `store/` (pure), `server/`; `client/` for callers, `--lease-addr` |",
		"| `docs/` | `decisions/` and `benchmarks.md` |",
		"| `VERSION` | the release |",
		"| `a` | 1 |", "| `b` | 2 |", "| `c` | 3 |", "| `d` | 4 |", "| `e` | 5 |", "| `f` | 6 |", "| `g` | 7 |",
		"", "## Development", "", "| `make test` | not the layout |",
	}, "\n")
	got := layoutRows(t, readme)[:3]
	want := []layoutRow{{"pkg/lease", []string{"store", "server", "client"}}, {"docs", []string{"decisions"}}, {"VERSION", nil}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(layoutRow{})); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
