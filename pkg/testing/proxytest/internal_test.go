package proxytest

import (
	"strings"
	"testing"
)

// A missing tinyproxy must fail with a message naming the make target,
// never skip.
func TestMissingTinyproxyNamesMakeTarget(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := tinyproxyDirs
	tinyproxyDirs = []string{t.TempDir()}
	defer func() { tinyproxyDirs = saved }()

	_, err := tinyproxyBinary()
	if err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("tinyproxyBinary() error = %v, want one naming `make deps`", err)
	}
}
