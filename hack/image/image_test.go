package main

import (
	"archive/tar"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// What skopeo inspect prints (the fields checked here).
type inspected struct {
	Name         string            `json:"Name"`
	Tag          string            `json:"Tag"`
	Architecture string            `json:"Architecture"`
	Os           string            `json:"Os"`
	Labels       map[string]string `json:"Labels"`
}

// What skopeo inspect --config prints: the OCI image config.
type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
}

// make image's layouts, as skopeo (Debian's, a tool nobody here wrote) reads
// them: entrypoint, non-root user, architecture and labels; and the binary
// inside, extracted from the layout, is static and runs --version.
func TestImages(t *testing.T) {
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		t.Fatal("skopeo not found: run `make deps` (hack/install-deps.sh installs it)")
	}
	src, err := ReadSource("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	platform := Platform{OS: "linux", Arch: runtime.GOARCH}
	for _, img := range slices.Concat(Images, NodeImages, CrawlerImages) {
		t.Run(img.Name, func(t *testing.T) {
			dir := filepath.Join(out, img.Name)
			if err := Build(src, img, []Platform{platform}, dir); err != nil {
				t.Fatal(err)
			}
			ref := "oci:" + dir + ":" + src.Version

			var manifest inspected
			skopeoJSON(t, skopeo, &manifest, "inspect", ref)
			wantLabels := map[string]string{
				"org.opencontainers.image.title":       img.Name,
				"org.opencontainers.image.description": img.Description,
				"org.opencontainers.image.version":     src.Version,
				"org.opencontainers.image.revision":    src.Revision,
				"org.opencontainers.image.source":      "https://github.com/proxyfleet/proxy-operator",
				"org.opencontainers.image.created":     src.Time.Format("2006-01-02T15:04:05Z07:00"),
			}
			if diff := cmp.Diff(wantLabels, manifest.Labels); diff != "" {
				t.Errorf("skopeo inspect labels (-want +got):\n%s", diff)
			}
			if manifest.Architecture != runtime.GOARCH || manifest.Os != "linux" {
				t.Errorf("skopeo inspect: %s/%s, want linux/%s", manifest.Os, manifest.Architecture, runtime.GOARCH)
			}
			if len(src.Revision) != 40 {
				t.Errorf("revision %q is not a git commit", src.Revision)
			}

			var cfg imageConfig
			skopeoJSON(t, skopeo, &cfg, "inspect", "--config", ref)
			if diff := cmp.Diff([]string{"/" + img.Name}, cfg.Config.Entrypoint); diff != "" {
				t.Errorf("entrypoint (-want +got):\n%s", diff)
			}
			if cfg.Config.User != "65532:65532" {
				t.Errorf("user %q, want 65532:65532 (numeric, non-root: runAsNonRoot checks it)", cfg.Config.User)
			}
			if diff := cmp.Diff(img.Cmd, cfg.Config.Cmd); diff != "" {
				t.Errorf("cmd (-want +got):\n%s", diff)
			}
			if cfg.Architecture != runtime.GOARCH || cfg.OS != "linux" {
				t.Errorf("config: %s/%s, want linux/%s", cfg.OS, cfg.Architecture, runtime.GOARCH)
			}

			bin := extract(t, dir, src.Version, img.Name)
			assertStatic(t, bin)
			got, err := exec.Command(bin, "--version").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --version: %v\n%s", img.Name, err, got)
			}
			if want := img.Name + " " + src.BinaryVersion() + "\n"; string(got) != want {
				t.Errorf("%s --version = %q, want %q", img.Name, got, want)
			}
		})
	}
}

// A prebuilt binary (make cluster-tools' CoreDNS) goes into the image as it
// is, without compiling: a stand-in built here runs from the extracted layer.
// A missing one is an error naming make cluster-tools.
func TestPrebuiltImage(t *testing.T) {
	src, err := ReadSource("../..")
	if err != nil {
		t.Fatal(err)
	}
	stand := filepath.Join(t.TempDir(), "netcheck")
	build := exec.Command("go", "build", "-o", stand, "./hack/cluster/netcheck")
	build.Dir, build.Env = src.Root, append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	img := Image{Name: "netcheck", Prebuilt: stand, Description: "a stand-in"}
	dir := filepath.Join(t.TempDir(), "layout")
	if err := Build(src, img, []Platform{{OS: "linux", Arch: runtime.GOARCH}}, dir); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command(extract(t, dir, src.Version, img.Name), "--version").CombinedOutput()
	if err != nil || string(got) != "netcheck dev\n" {
		t.Errorf("the prebuilt binary from the image: %v, %q; want the stand-in's \"netcheck dev\"", err, got)
	}
	img.Prebuilt = filepath.Join(t.TempDir(), "missing")
	if err := Build(src, img, []Platform{{OS: "linux", Arch: runtime.GOARCH}}, dir); err == nil || !strings.Contains(err.Error(), "make cluster-tools") {
		t.Errorf("a missing prebuilt binary: %v, want an error naming make cluster-tools", err)
	}
}

// The layout's image names are the ones the artifacts and the kubernetes
// provider's default point at (their own tests check them against VERSION).
func TestRefs(t *testing.T) {
	got := map[string]string{}
	for _, img := range Images {
		got[img.Name] = img.Ref("v1.2.3")
	}
	want := map[string]string{
		"proxy-operator": "ghcr.io/proxyfleet/proxy-operator:v1.2.3",
		"forward-proxy":  "ghcr.io/proxyfleet/forward-proxy:v1.2.3",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("refs (-want +got):\n%s", diff)
	}
}

func TestBinaryVersion(t *testing.T) {
	tests := map[string]struct {
		src  Source
		want string
	}{
		"clean":   {Source{Version: "v0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567"}, "v0.1.0+0123456789ab"},
		"dirty":   {Source{Version: "v0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567", Dirty: true}, "v0.1.0+0123456789ab.dirty"},
		"not git": {Source{Version: "v0.1.0", Revision: "unknown"}, "v0.1.0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.src.BinaryVersion(); got != tc.want {
				t.Errorf("BinaryVersion() = %q, want %q", got, tc.want)
			}
		})
	}
}

func skopeoJSON(t *testing.T, skopeo string, into any, args ...string) {
	t.Helper()
	out, err := exec.Command(skopeo, args...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, exit.Stderr)
		}
		t.Fatalf("skopeo %s: %v", strings.Join(args, " "), err)
	}
	if err := json.Unmarshal(out, into); err != nil {
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// extract reads the image tagged tag from the layout and writes its file
// name (the entrypoint) to a temporary executable.
func extract(t *testing.T, dir, tag, name string) string {
	t.Helper()
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range manifest.Manifests {
		if desc.Annotations["org.opencontainers.image.ref.name"] != tag {
			continue
		}
		img, err := index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		fs := mutate.Extract(img)
		defer fs.Close()
		tr := tar.NewReader(fs)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if hdr.Name != name {
				continue
			}
			if hdr.Mode&0o111 == 0 {
				t.Errorf("/%s is not executable: mode %o", name, hdr.Mode)
			}
			path := filepath.Join(t.TempDir(), name)
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			return path
		}
		t.Fatalf("image %s:%s has no /%s", dir, tag, name)
	}
	t.Fatalf("layout %s has no image tagged %s", dir, tag)
	return ""
}

// assertStatic: on an empty base there is no dynamic loader to run it.
func assertStatic(t *testing.T, path string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: not static (CGO_ENABLED=0?)", filepath.Base(path))
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s links %v: not static", filepath.Base(path), libs)
	}
}
