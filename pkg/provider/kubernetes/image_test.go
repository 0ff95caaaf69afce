package kubernetes

import (
	"os"
	"strings"
	"testing"
)

// The default Pod image is the forward-proxy image `make image` builds
// (hack/image: ghcr.io/proxyfleet/<name>:<VERSION>); a release bumps VERSION
// and this constant together.
func TestDefaultImageIsTheOneMakeImageTags(t *testing.T) {
	raw, err := os.ReadFile("../../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	want := "ghcr.io/proxyfleet/forward-proxy:" + strings.TrimSpace(string(raw))
	if DefaultImage != want {
		t.Errorf("DefaultImage = %q, want %q (the VERSION tag make image writes)", DefaultImage, want)
	}
}
