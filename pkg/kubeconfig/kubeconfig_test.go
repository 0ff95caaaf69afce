package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadSources(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kubeconfig")
	const content = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: "not-a-secret"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		flag, env string
		wantHost  string
		wantErr   string
	}{
		"flag":              {flag: path, wantHost: "https://127.0.0.1:6443"},
		"env":               {env: path, wantHost: "https://127.0.0.1:6443"},
		"flag wins":         {flag: path, env: filepath.Join(dir, "missing"), wantHost: "https://127.0.0.1:6443"},
		"missing flag file": {flag: filepath.Join(dir, "missing"), wantErr: "--kubeconfig " + filepath.Join(dir, "missing")},
		"nothing":           {wantErr: "no --kubeconfig or $KUBECONFIG, and not in a cluster"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.env)
			t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster, wherever the test runs
			cfg, err := Load(tc.flag)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load() error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.wantHost {
				t.Errorf("Host = %q, want %q", cfg.Host, tc.wantHost)
			}
		})
	}
}
