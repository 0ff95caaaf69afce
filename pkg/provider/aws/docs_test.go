package aws_test

// The cloud-config of docs/aws.md §7 is run here with Debian's squid,
// against the user-data the provider really builds for the documented
// Proxy, so the page cannot drift into a configuration that does not start,
// does not authenticate or opens the metadata service. examples/aws.yaml
// must carry the same cloud-config.

import (
	"bytes"
	"context"
	"net/http"
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
	"github.com/proxyfleet/proxy-operator/pkg/provider/aws"
	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/ec2test"
	"github.com/proxyfleet/proxy-operator/pkg/testing/provider/faultkit"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// squidUserData is the part of a cloud-config the test reads.
type squidUserData struct {
	WriteFiles []struct{ Path, Content string } `json:"write_files"`
	RunCmd     []string                         `json:"runcmd"`
}

// documentedManifest reads the Secret's user-data and the Proxy of the
// yaml block in path that holds a cloud-config.
func documentedManifest(t *testing.T, path string) (string, *crawlv1alpha1.Proxy) {
	t.Helper()
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	manifest := page
	if strings.HasSuffix(path, ".md") {
		manifest = nil
		for _, b := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(page, -1) {
			if bytes.Contains(b[1], []byte("#cloud-config")) {
				manifest = b[1]
			}
		}
	}
	var userData string
	var proxy *crawlv1alpha1.Proxy
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch meta.Kind {
		case "Secret":
			var s corev1.Secret
			if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			userData = s.StringData["user-data"]
		case "Proxy":
			proxy = &crawlv1alpha1.Proxy{}
			if err := yaml.UnmarshalStrict([]byte(doc), proxy); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
	}
	if userData == "" || proxy == nil {
		t.Fatalf("%s: no Secret with a user-data and a Proxy in one yaml block", path)
	}
	return userData, proxy
}

func TestDocumentedSquidCloudInit(t *testing.T) {
	t.Parallel()
	userData, proxy := documentedManifest(t, "../../../docs/aws.md")
	if example, _ := documentedManifest(t, "../../../examples/aws.yaml"); example != userData {
		t.Errorf("examples/aws.yaml's cloud-config differs from docs/aws.md §7's, which this test runs")
	}
	var doc squidUserData
	if err := yaml.Unmarshal([]byte(userData), &doc); err != nil {
		t.Fatal(err)
	}
	var squidConf string
	for _, f := range doc.WriteFiles {
		if f.Path == "/etc/squid/squid.conf" {
			squidConf = f.Content
		}
	}
	if squidConf == "" || len(doc.RunCmd) == 0 || proxy.Spec.Auth != nil {
		t.Fatalf("the example must write /etc/squid/squid.conf, have a runcmd and use generated credentials (spec.auth unset)")
	}

	// The instance the provider launches for the documented Proxy, with
	// generated credentials that a shell must quote.
	const user, password = "Gen-User-Ab3", `pa'ss w0rd$x"`
	proxy.Namespace, proxy.UID = "crawlers", uid(70)
	fake := ec2test.New(t)
	prov := newProvider(t, fake, func(o *aws.Options) {
		o.Secrets = func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
			return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{crawlv1alpha1.ProxyCredentialsLabel: crawlv1alpha1.ProxyCredentialsLabelValue}},
				Data: map[string][]byte{"username": []byte(user), "password": []byte(password)}}, nil
		}
	})
	req := provider.CreateRequest{Name: provider.InstanceName(proxy.UID), Proxy: proxy, Tags: provider.Tags(proxy), SpecHash: "h", CloudInit: []byte(userData)}
	if _, err := prov.Create(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	launched := fake.Instances()[0].UserData
	if !strings.Contains(launched, squidConf[:strings.Index(squidConf, "\n")]) {
		t.Fatalf("the launched user-data lacks the documented cloud-config")
	}
	envFile, err := faultkit.UserDataEnvFile(launched)
	if err != nil {
		t.Fatal(err)
	}
	if env, _ := faultkit.UserDataEnv(launched); !strings.Contains(squidConf, "http_port "+env["PROXY_PORT"]+"\n") {
		t.Errorf("squid's http_port is not the instance's PROXY_PORT %q (spec.aws.port)", env["PROXY_PORT"])
	}

	// cloud-init writes the env file, then runs the runcmd: here with the
	// instance's paths moved into a temporary directory.
	dir := t.TempDir()
	paths := strings.NewReplacer(aws.EnvFile, filepath.Join(dir, "proxy.env"), "/etc/squid/passwords", filepath.Join(dir, "passwords"))
	if err := os.WriteFile(filepath.Join(dir, "proxy.env"), []byte(envFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if cmd := doc.RunCmd[0]; !strings.Contains(cmd, aws.EnvFile) || !strings.Contains(cmd, "/etc/squid/passwords") {
		t.Fatalf("the first runcmd must read %s and write /etc/squid/passwords: %q", aws.EnvFile, cmd)
	}
	integration.Needs(t, "sh, openssl and squid from Debian (`make deps`), run as processes")
	if out, err := exec.Command("sh", "-c", paths.Replace(doc.RunCmd[0])).CombinedOutput(); err != nil {
		t.Fatalf("the documented runcmd failed: %v\n%s", err, out)
	}

	// Loopback, where the test's targets live, is admitted here as every
	// test proxy does; the rest of the internal ACL stays.
	const loopbackACL = " 127.0.0.0/8"
	if !strings.Contains(squidConf, "acl internal dst 0.0.0.0/8"+loopbackACL+" ") {
		t.Fatal("the documented squid.conf does not refuse 127.0.0.0/8")
	}
	addr := proxytest.StartDocumentedSquid(t, strings.Replace(squidConf, loopbackACL, "", 1), filepath.Join(dir, "passwords"))
	target := proxytest.StartHTTPTarget(t)
	httpsTarget := proxytest.StartHTTPSTarget(t) // not on 443: CONNECT must be refused
	withAuth := &url.URL{Scheme: "http", Host: addr, User: url.UserPassword(user, password)}
	proxytest.CheckFetches(t, map[string]proxytest.FetchCase{
		"authenticated":             {Proxy: withAuth, Target: target.URL + "/generate_204", WantStatus: http.StatusNoContent},
		"no credentials":            {Proxy: &url.URL{Scheme: "http", Host: addr}, Target: target.URL + "/generate_204", WantStatus: http.StatusProxyAuthRequired},
		"wrong password":            {Proxy: &url.URL{Scheme: "http", Host: addr, User: url.UserPassword(user, "wrong")}, Target: target.URL + "/generate_204", WantStatus: http.StatusProxyAuthRequired},
		"username in lower case":    {Proxy: &url.URL{Scheme: "http", Host: addr, User: url.UserPassword(strings.ToLower(user), password)}, Target: target.URL + "/generate_204", WantStatus: http.StatusProxyAuthRequired},
		"CONNECT to a port but 443": {Proxy: withAuth, Target: httpsTarget.URL + "/generate_204", WantConnect: http.StatusForbidden},
		// Refused before squid connects; StartDocumentedSquid's safety net
		// makes a broken rule a 503, never a connection beyond loopback.
		"metadata service":            {Proxy: withAuth, Target: "http://169.254.169.254/latest/meta-data/", WantStatus: http.StatusForbidden},
		"metadata service by name":    {Proxy: withAuth, Target: "http://instance-data/latest/meta-data/", WantStatus: http.StatusForbidden},
		"metadata service over IPv6":  {Proxy: withAuth, Target: "http://[fd00:ec2::254]/latest/meta-data/", WantStatus: http.StatusForbidden},
		"CONNECT to metadata service": {Proxy: withAuth, Target: "https://169.254.169.254/", WantConnect: http.StatusForbidden},
		"private range":               {Proxy: withAuth, Target: "http://10.0.0.1/", WantStatus: http.StatusForbidden},
		"internal name":               {Proxy: withAuth, Target: "http://ip-10-0-0-1.eu-west-1.compute.internal/", WantStatus: http.StatusForbidden},
	}, proxytest.RootCAs(httpsTarget))
}
