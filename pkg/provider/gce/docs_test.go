package gce_test

// The cloud-init in docs/gce.md is run here with Debian's squid (the package
// the cloud-init installs), so the page cannot drift into a configuration
// that does not start or does not authenticate.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/gcetest"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

const docsPath = "../../../docs/gce.md"

// cloudConfig is the part of a cloud-config the test reads.
type cloudConfig struct {
	Packages   []string `json:"packages"`
	WriteFiles []struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	} `json:"write_files"`
	RunCmd []string `json:"runcmd"`
}

// documentedExample is the manifest of docs/gce.md §2, split into its objects.
type documentedExample struct {
	userData cloudConfig
	proxy    *crawlv1alpha1.Proxy
}

func readDocumentedExample(t *testing.T) documentedExample {
	t.Helper()
	page, err := os.ReadFile(docsPath)
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(page, -1)
	var manifest []byte
	for _, b := range blocks {
		if bytes.Contains(b[1], []byte("#cloud-config")) {
			manifest = b[1]
		}
	}
	if manifest == nil {
		t.Fatalf("%s has no yaml block with a cloud-config", docsPath)
	}
	var ex documentedExample
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("manifest document: %v\n%s", err, doc)
		}
		switch meta.Kind {
		case "Secret":
			var s corev1.Secret
			if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
				t.Fatal(err)
			}
			if ud, ok := s.StringData["user-data"]; ok {
				if !strings.HasPrefix(ud, "#cloud-config\n") {
					t.Errorf("the user-data does not start with #cloud-config")
				}
				if err := yaml.Unmarshal([]byte(ud), &ex.userData); err != nil {
					t.Fatalf("user-data: %v", err)
				}
			} else {
				t.Errorf("the example has a Secret %q besides the user-data: the credentials come from the VM's metadata", s.Name)
			}
		case "Proxy":
			ex.proxy = &crawlv1alpha1.Proxy{}
			if err := yaml.UnmarshalStrict([]byte(doc), ex.proxy); err != nil {
				t.Fatalf("Proxy: %v", err)
			}
		}
	}
	if ex.proxy == nil {
		t.Fatal("the example lacks the Proxy")
	}
	return ex
}

func TestDocumentedSquidCloudInit(t *testing.T) {
	t.Parallel()
	ex := readDocumentedExample(t)

	var squidConf string
	for _, f := range ex.userData.WriteFiles {
		if f.Path == "/etc/squid/squid.conf" {
			squidConf = f.Content
		}
	}
	var passwordCmd string
	for _, cmd := range ex.userData.RunCmd {
		if strings.Contains(cmd, "> /etc/squid/passwords") {
			passwordCmd = cmd
		}
	}
	switch {
	case squidConf == "":
		t.Fatal("the cloud-init writes no /etc/squid/squid.conf")
	case passwordCmd == "":
		t.Fatalf("no runcmd writes /etc/squid/passwords: %q", ex.userData.RunCmd)
	case ex.proxy.Spec.Auth != nil:
		t.Errorf("the example sets spec.auth; it is meant to show the generated credentials")
	}
	// The VM the provider builds for the documented Proxy, whose metadata
	// carries its generated credentials; the runcmd reads them from a
	// metadata server on loopback that serves that VM's metadata.
	ex.proxy.Namespace, ex.proxy.UID = "crawl", "3f0e7a52-4c1b-4d7e-9a39-0c1d2e3f4a5b"
	const user, password = "gen-user-Ab3", "gen-password-Zx9_q-L"
	passwordsFile := runPasswordCommand(t, passwordCmd, vmMetadata(t, ex.proxy, user, password))
	if port := ex.proxy.Spec.GCE.Port; !strings.Contains(squidConf, fmt.Sprintf("http_port %d\n", port)) {
		t.Errorf("squid's http_port is not spec.gce.port %d", port)
	}

	// The documented squid refuses loopback too; the test's targets live
	// there, so loopback alone is admitted here, as every test proxy does.
	const loopbackACL = " 127.0.0.0/8"
	if !regexp.MustCompile(`(?m)^acl internal dst .*` + regexp.QuoteMeta(loopbackACL) + `( |$)`).MatchString(squidConf) {
		t.Fatalf("the documented squid.conf does not refuse 127.0.0.0/8 in its internal ACL")
	}
	for _, want := range []string{"http_access deny metadata_name\n", "http_access deny internal\n", "169.254.0.0/16", "10.0.0.0/8", "fc00::/7"} {
		if !strings.Contains(squidConf, want) {
			t.Errorf("the documented squid.conf lacks %q", want)
		}
	}
	squidConf = strings.Replace(squidConf, loopbackACL, "", 1)

	proxyAddr := proxytest.StartDocumentedSquid(t, squidConf, passwordsFile)
	target := proxytest.StartHTTPTarget(t)
	httpsTarget := proxytest.StartHTTPSTarget(t) // not on 443: CONNECT must be refused
	withAuth := &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword(user, password)}
	proxytest.CheckFetches(t, map[string]proxytest.FetchCase{
		"authenticated":             {Proxy: withAuth, Target: target.URL + "/generate_204", WantStatus: http.StatusNoContent},
		"no credentials":            {Proxy: &url.URL{Scheme: "http", Host: proxyAddr}, Target: target.URL + "/generate_204", WantStatus: http.StatusProxyAuthRequired},
		"wrong password":            {Proxy: &url.URL{Scheme: "http", Host: proxyAddr, User: url.UserPassword(user, "wrong")}, Target: target.URL + "/generate_204", WantStatus: http.StatusProxyAuthRequired},
		"CONNECT to a port but 443": {Proxy: withAuth, Target: httpsTarget.URL + "/generate_204", WantConnect: http.StatusForbidden},
		// Refused by squid before it connects; startSquid's safety net makes
		// a broken rule a 503, never a connection beyond loopback.
		"metadata server":            {Proxy: withAuth, Target: "http://169.254.169.254/computeMetadata/v1/", WantStatus: http.StatusForbidden},
		"metadata server by name":    {Proxy: withAuth, Target: "http://metadata.google.internal/computeMetadata/v1/", WantStatus: http.StatusForbidden},
		"CONNECT to metadata server": {Proxy: withAuth, Target: "https://169.254.169.254/", WantConnect: http.StatusForbidden},
		"private range":              {Proxy: withAuth, Target: "http://10.0.0.1/", WantStatus: http.StatusForbidden},
		"CGNAT":                      {Proxy: withAuth, Target: "http://100.64.0.1/", WantStatus: http.StatusForbidden},
		"IPv6 loopback":              {Proxy: withAuth, Target: "http://[::1]:80/", WantStatus: http.StatusForbidden},
		"unique local IPv6":          {Proxy: withAuth, Target: "https://[fd00::1]/", WantConnect: http.StatusForbidden},
	}, proxytest.RootCAs(httpsTarget))
}

// vmMetadata creates the VM of p through the gce provider (against the fake
// Compute Engine API), its credentials Secret holding user and password,
// and returns the VM's metadata.
func vmMetadata(t *testing.T, p *crawlv1alpha1.Proxy, user, password string) map[string]string {
	t.Helper()
	zone := p.Spec.GCE.Zone
	fake := gcetest.New(t, gcetest.WithZones(gcetest.DefaultProject, zone))
	secretName := proxyaccess.CredentialsSecret(p)
	prov, err := gce.New(context.Background(), gce.Options{
		Project: gcetest.DefaultProject, Endpoint: fake.URL, HTTPClient: fake.HTTPClient(),
		Secrets: func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
			if namespace != p.Namespace || name != secretName {
				return nil, fmt.Errorf("unexpected Secret %s/%s", namespace, name)
			}
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
				Data: map[string][]byte{"username": []byte(user), "password": []byte(password)}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	name := provider.InstanceName(p.UID)
	if _, err := prov.Create(context.Background(), provider.CreateRequest{Name: name, Proxy: p, Tags: provider.Tags(p), CloudInit: []byte("#cloud-config\n")}); err != nil {
		t.Fatal(err)
	}
	vm, ok := fake.Instance(gcetest.DefaultProject, zone, name)
	if !ok {
		t.Fatal("the fake has no VM")
	}
	md := map[string]string{}
	for _, item := range vm.Metadata.Items {
		md[item.Key] = *item.Value
	}
	return md
}

// runPasswordCommand runs the documented runcmd line that writes squid's
// passwords file, with its metadata server on loopback serving metadata
// (and, like Compute Engine's, refusing requests without the
// Metadata-Flavor header), and its output in a temporary file, whose path
// it returns.
func runPasswordCommand(t *testing.T, cmd string, metadata map[string]string) string {
	t.Helper()
	const attributes = "/computeMetadata/v1/instance/attributes/"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := metadata[strings.TrimPrefix(r.URL.Path, attributes)]
		switch {
		case r.Header.Get("Metadata-Flavor") != "Google":
			http.Error(w, "missing Metadata-Flavor:Google header", http.StatusForbidden)
		case !strings.HasPrefix(r.URL.Path, attributes) || !ok:
			http.NotFound(w, r)
		default:
			_, _ = io.WriteString(w, v)
		}
	}))
	t.Cleanup(srv.Close)
	const metadataServer = "http://metadata.google.internal"
	passwords := filepath.Join(t.TempDir(), "passwords")
	if !strings.Contains(cmd, metadataServer+attributes) {
		t.Fatalf("the runcmd does not read %s: %s", metadataServer+attributes, cmd)
	}
	local := strings.ReplaceAll(cmd, metadataServer, srv.URL)
	local = strings.ReplaceAll(local, "/etc/squid/passwords", passwords)
	integration.Needs(t, "sh, curl, openssl and squid from Debian (`make deps`), run as processes")
	if out, err := exec.Command("sh", "-c", local).CombinedOutput(); err != nil {
		t.Fatalf("the documented runcmd failed: %v\n%s", err, out)
	}
	return passwords
}
