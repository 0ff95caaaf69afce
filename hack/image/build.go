package main

import (
	"archive/tar"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Registry is where the images are published. artifacts/ and the kubernetes
// provider's DefaultImage name the same repositories with the VERSION tag;
// tests on both sides keep them in step.
const Registry = "ghcr.io/proxyfleet"

// User is the numeric non-root user (distroless' "nonroot") the images run as,
// the one artifacts/deploy's securityContext names: numeric, so that
// runAsNonRoot can check it without an /etc/passwd.
const User = "65532:65532"

// sourceURL is the org.opencontainers.image.source label.
const sourceURL = "https://github.com/proxyfleet/proxy-operator"

// caBundle is copied into images that make TLS calls of their own (the
// operator: cloud APIs, https probe targets); the empty base has no roots.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// Image is one image make image builds.
type Image struct {
	Name        string // repository under Registry, and the binary's name
	Package     string // what go build compiles
	Description string
	// VersionVar is the string variable -X sets to the binary version.
	VersionVar   string
	Cmd          []string // default arguments after the entrypoint
	ExposedPorts []string // "3128/tcp"
	CABundle     bool
	// Prebuilt, when set, is a binary (relative to the repository) put in
	// the image instead of compiling Package: a pinned third-party build of
	// make cluster-tools, for the host's architecture only.
	Prebuilt string
}

// Images are the ones make image writes.
var Images = []Image{
	{
		Name:        "proxy-operator",
		Package:     "./cmd/proxy-operator",
		Description: "Kubernetes operator for a fleet of crawler forward proxies (crawl.proxyfleet.io Proxy).",
		VersionVar:  "github.com/proxyfleet/proxy-operator/pkg/operator.version",
		CABundle:    true,
	},
	{
		Name:         "forward-proxy",
		Package:      "./cmd/forward-proxy",
		Description:  "Forward HTTP(S) proxy run by proxy-operator's kubernetes provider.",
		VersionVar:   "main.version",
		Cmd:          []string{"--listen=:3128"},
		ExposedPorts: []string{"3128/tcp"},
	},
}

// NodeImages are make cluster's own, built only when asked for (--images):
// the node's sandbox ("pause"; users' clusters bring their own) and the HTTP
// target of the real-node suite.
var NodeImages = []Image{
	{
		Name:        "pause",
		Package:     "./hack/cluster/pause",
		Description: "Pod sandbox of proxy-operator's test node (make cluster).",
		VersionVar:  "main.version",
	},
	{
		Name:         "echo",
		Package:      "./hack/cluster/echo",
		Description:  "HTTP target of proxy-operator's real-node suite: answers with the caller's address.",
		VersionVar:   "main.version",
		Cmd:          []string{"--listen=:8080"},
		ExposedPorts: []string{"8080/tcp"},
	},
	{
		Name:        "netcheck",
		Package:     "./hack/cluster/netcheck",
		Description: "TCP probe of proxy-operator's real-node suite: which NetworkPolicy paths connect.",
		VersionVar:  "main.version",
	},
}

// NodeAddonImages are the pinned third-party builds make cluster runs as
// Pods: its cluster DNS. Built only when asked for.
var NodeAddonImages = []Image{
	{
		Name:         "coredns",
		Prebuilt:     "bin/coredns",
		Description:  "CoreDNS, the cluster DNS of proxy-operator's test node (make cluster; hack/tools/build-tool.sh coredns).",
		Cmd:          []string{"-conf", "/etc/coredns/Corefile"},
		ExposedPorts: []string{"53/udp", "53/tcp"},
	},
}

// CrawlerImages are crawlers that use the fleet, built only when asked for:
// the example crawler worker, which the real-node suite runs as a Pod.
var CrawlerImages = []Image{
	{
		Name:        "crawler",
		Package:     "./examples/crawler",
		Description: "Example crawler worker of proxy-operator: leases proxies from the lease API, or crawls through the gateway.",
		VersionVar:  "main.version",
	},
}

// Ref is the image's name and tag in Registry.
func (img Image) Ref(version string) string { return Registry + "/" + img.Name + ":" + version }

// Entrypoint is the binary's path in the image.
func (img Image) Entrypoint() string { return "/" + img.Name }

// Source is what the build stamps into binaries and labels.
type Source struct {
	Root     string
	Version  string    // the VERSION file: the image tag
	Revision string    // full git commit, "unknown" outside git
	Dirty    bool      // uncommitted changes in the work tree
	Time     time.Time // commit time (or SOURCE_DATE_EPOCH): created, and every file's mtime
}

// ReadSource reads VERSION and asks git for the commit.
func ReadSource(root string) (Source, error) {
	raw, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return Source{}, err
	}
	src := Source{Root: root, Version: strings.TrimSpace(string(raw)), Revision: "unknown", Time: time.Unix(0, 0).UTC()}
	if !validTag(src.Version) {
		return Source{}, fmt.Errorf("VERSION: %q is not an image tag like v0.1.0", src.Version)
	}
	if out, err := git(root, "rev-parse", "HEAD"); err == nil {
		src.Revision = out
		if ct, err := git(root, "log", "-1", "--format=%ct"); err == nil {
			if sec, err := strconv.ParseInt(ct, 10, 64); err == nil {
				src.Time = time.Unix(sec, 0).UTC()
			}
		}
		status, err := git(root, "status", "--porcelain", "--untracked-files=no")
		src.Dirty = err == nil && status != ""
	}
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		sec, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return Source{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		src.Time = time.Unix(sec, 0).UTC()
	}
	return src, nil
}

// BinaryVersion is what --version prints: the tag, plus the commit as semver
// build metadata, so that two builds of one tag are told apart.
func (s Source) BinaryVersion() string {
	if s.Revision == "unknown" {
		return s.Version
	}
	v := s.Version + "+" + s.Revision[:min(12, len(s.Revision))]
	if s.Dirty {
		v += ".dirty"
	}
	return v
}

func validTag(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func git(dir string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	return strings.TrimSpace(string(out)), err
}

// Platform is a target of the build.
type Platform struct{ OS, Arch string }

// Build compiles img for every platform and writes an OCI layout to dir (replacing
// it), whose index.json names the image by the VERSION tag: one manifest for one
// platform, an image index for several.
func Build(src Source, img Image, platforms []Platform, dir string) error {
	var images []v1.Image
	for _, p := range platforms {
		bin, err := compile(src, img, p)
		if err != nil {
			return err
		}
		i, err := assemble(src, img, p, bin)
		if err != nil {
			return err
		}
		images = append(images, i)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	path, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	annotations := map[string]string{
		// skopeo's oci:DIR:TAG and crane's layout tools find the image by this.
		"org.opencontainers.image.ref.name": src.Version,
		"io.containerd.image.name":          img.Ref(src.Version),
	}
	if len(images) == 1 {
		return path.AppendImage(images[0], layout.WithAnnotations(annotations))
	}
	var index v1.ImageIndex = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, p := range platforms {
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add:        images[i],
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch}},
		})
	}
	return path.AppendIndex(index, layout.WithAnnotations(annotations))
}

// compile builds a static binary and returns its content (a prebuilt one is
// read as it is).
func compile(src Source, img Image, p Platform) ([]byte, error) {
	if img.Prebuilt != "" {
		if p.OS != "linux" || p.Arch != runtime.GOARCH {
			return nil, fmt.Errorf("%s is built for linux/%s only, not %s/%s", img.Prebuilt, runtime.GOARCH, p.OS, p.Arch)
		}
		path := img.Prebuilt
		if !filepath.IsAbs(path) {
			path = filepath.Join(src.Root, path)
		}
		bin, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w (make cluster-tools builds it)", err)
		}
		return bin, nil
	}
	tmp, err := os.MkdirTemp("", "image-"+img.Name)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, img.Name)
	ldflags := fmt.Sprintf("-s -w -X %s=%s", img.VersionVar, src.BinaryVersion())
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, img.Package)
	cmd.Dir = src.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch, "GOWORK=off")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build %s for %s/%s: %w", img.Package, p.OS, p.Arch, err)
	}
	return os.ReadFile(out)
}

// assemble puts the binary on the empty base as a single layer.
func assemble(src Source, img Image, p Platform, bin []byte) (v1.Image, error) {
	files := []tarFile{{name: img.Entrypoint()[1:], mode: 0o555, content: bin}}
	if img.CABundle {
		ca, err := os.ReadFile(caBundle)
		if err != nil {
			return nil, fmt.Errorf("CA bundle for TLS calls (Debian's ca-certificates): %w", err)
		}
		files = append(files, tarFile{name: caBundle[1:], mode: 0o444, content: ca})
	}
	layerTar, err := tarOf(files, src.Time)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	withLayer, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{CreatedBy: "hack/image: " + cmp.Or(img.Package, img.Prebuilt), Created: v1.Time{Time: src.Time}},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := withLayer.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = p.OS, p.Arch
	cfg.Created = v1.Time{Time: src.Time}
	cfg.Config.Entrypoint = []string{img.Entrypoint()}
	cfg.Config.Cmd = img.Cmd
	cfg.Config.User = User
	cfg.Config.WorkingDir = "/"
	if len(img.ExposedPorts) > 0 {
		cfg.Config.ExposedPorts = map[string]struct{}{}
		for _, port := range img.ExposedPorts {
			cfg.Config.ExposedPorts[port] = struct{}{}
		}
	}
	cfg.Config.Labels = Labels(src, img)
	return mutate.ConfigFile(withLayer, cfg)
}

// Labels are the OCI annotations of https://github.com/opencontainers/image-spec/blob/main/annotations.md.
func Labels(src Source, img Image) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       img.Name,
		"org.opencontainers.image.description": img.Description,
		"org.opencontainers.image.version":     src.Version,
		"org.opencontainers.image.revision":    src.Revision,
		"org.opencontainers.image.source":      sourceURL,
		"org.opencontainers.image.created":     src.Time.Format(time.RFC3339),
	}
}

type tarFile struct {
	name    string
	mode    int64
	content []byte
}

// tarOf writes files (and their parent directories) owned by root with a fixed
// mtime, so that one commit always yields the same layer.
func tarOf(files []tarFile, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		var parents []string
		for d := filepath.Dir(f.name); d != "."; d = filepath.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.content)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
