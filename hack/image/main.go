// Command image builds the OCI image layouts of proxy-operator and forward-proxy
// without Docker: each binary is compiled static (CGO_ENABLED=0) and put alone on
// an empty base, with a non-root numeric user, an entrypoint and the OCI labels.
// `make image` runs it; push the result with skopeo copy or crane push (see
// docs/operations.md).
//
// It lives in its own module so that go-containerregistry never enters the
// operator's go.mod; it builds the operator by running `go build` in the
// repository, as a developer would.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

func main() {
	repo := flag.String("repo", "../..", "root of the proxy-operator repository")
	out := flag.String("out", "", "directory the layouts are written to, one per image (default <repo>/.local/images)")
	names := flag.String("images", "proxy-operator,forward-proxy", "comma-separated images to build: proxy-operator, forward-proxy; pause, echo, netcheck and coredns (make cluster's own); crawler")
	tag := flag.String("tag", "", "the image tag and binary version (default: the VERSION file); the real-node suite builds an upgrade with it")
	platforms := flag.String("platforms", "linux/"+runtime.GOARCH, "comma-separated os/arch list; more than one writes an image index")
	flag.Parse()

	root, err := filepath.Abs(*repo)
	if err != nil {
		fail(err)
	}
	if *out == "" {
		*out = filepath.Join(root, ".local", "images")
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		fail(err)
	}
	images, err := selectImages(*names)
	if err != nil {
		fail(err)
	}
	src, err := ReadSource(root)
	if err != nil {
		fail(err)
	}
	if *tag != "" {
		if !validTag(*tag) {
			fail(fmt.Errorf("--tag: %q is not an image tag like v0.1.0", *tag))
		}
		src.Version = *tag
	}
	for _, img := range images {
		dir := filepath.Join(*out, img.Name)
		if err := Build(src, img, plats, dir); err != nil {
			fail(fmt.Errorf("%s: %w", img.Name, err))
		}
		fmt.Printf("%s %s -> oci:%s:%s\n", img.Ref(src.Version), src.BinaryVersion(), dir, src.Version)
	}
}

func selectImages(s string) ([]Image, error) {
	known := slices.Concat(Images, NodeImages, NodeAddonImages, CrawlerImages)
	var out []Image
	for _, name := range strings.Split(s, ",") {
		i := slices.IndexFunc(known, func(img Image) bool { return img.Name == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("--images: no image %q (want proxy-operator, forward-proxy, pause, echo, netcheck, coredns or crawler)", name)
		}
		out = append(out, known[i])
	}
	return out, nil
}

func parsePlatforms(s string) ([]Platform, error) {
	var out []Platform
	for _, p := range strings.Split(s, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || osName != "linux" || arch == "" {
			return nil, fmt.Errorf("--platforms: %q is not linux/<arch>", p)
		}
		out = append(out, Platform{OS: osName, Arch: arch})
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}
