package health_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/testing/eventually"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// proxyCredentialsLabel is the label users write on a Secret meant for
// proxies, spelt out: it is public API, and a rename must break this test.
const proxyCredentialsLabel = "crawl.proxyfleet.io/proxy-credentials"

// markedForProxies labels the credentials Secrets the harness creates.
var markedForProxies = map[string]string{proxyCredentialsLabel: "true"}

// TestUnmarkedCredentialsAreNeverSent: a Proxy may name only a Secret marked
// for proxies (docs/decisions/0230-credentials-secrets-opt-in-by-label.md).
// An External Proxy (spec.auth.secretRef) and a proxy network's session
// (spec.upstream.credentialsSecretRef) name unmarked Secrets, with an
// endpoint the test listens on and records: the endpoint never receives the
// passwords, the Proxies are not Ready with a condition and an event naming
// the field, and a control Proxy beside them shows that the engine probed
// meanwhile. Labelling the Secrets heals both, and only then do the
// passwords arrive; removing the label again deletes the session's copy.
func TestUnmarkedCredentialsAreNeverSent(t *testing.T) {
	t.Parallel()
	const (
		externalPassword = "ext-Pa55-never-sent"
		upstreamPassword = "vendor-Pa55-never-sent"
		controlPassword  = "control-Pa55"
	)
	target := proxytest.StartHTTPTarget(t)
	h := start(t, nil)
	endpoint := startRecordingProxy(t, externalPassword, upstreamPassword, controlPassword)
	host, port := splitAddr(t, endpoint.addr)

	h.createUnmarkedSecret("ext-auth", map[string]string{"username": "crawler", "password": externalPassword})
	h.createUnmarkedSecret("vendor", map[string]string{"password": upstreamPassword})
	h.createSecret("control-auth", "crawler", controlPassword)
	created := h.create(external(t, "ext", endpoint.addr, target.URL+"/generate_204", authSecret("ext-auth")))
	session := external(t, "session", endpoint.addr, target.URL+"/generate_204")
	session.Spec.Mode, session.Spec.Endpoint = crawlv1alpha1.ModeManaged, nil
	session.Spec.Provider = crawlv1alpha1.ProviderUpstream
	session.Spec.Upstream = &crawlv1alpha1.UpstreamProvider{
		Endpoint:             crawlv1alpha1.Endpoint{Host: host, Port: port},
		CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: "vendor"},
		UsernameTemplate:     "u-{session}",
	}
	h.create(session)
	h.create(external(t, "control", endpoint.addr, target.URL+"/generate_204", authSecret("control-auth")))

	refused := map[string]string{
		"ext":     `spec.auth.secretRef: Secret "ext-auth" is not marked for proxy use: add the label crawl.proxyfleet.io/proxy-credentials: "true" to it (kubectl label secret ext-auth crawl.proxyfleet.io/proxy-credentials=true)`,
		"session": `spec.upstream.credentialsSecretRef: Secret "vendor" is not marked for proxy use: add the label crawl.proxyfleet.io/proxy-credentials: "true" to it (kubectl label secret vendor crawl.proxyfleet.io/proxy-credentials=true)`,
	}
	// The control Proxy turns Ready and is probed twice more: the engine
	// ran for two intervals after the others were created.
	h.waitForPhase("control", crawlv1alpha1.PhaseReady, created, interval+slack)
	h.waitForProbes("control", 2)
	for name := range refused {
		if p := h.get(name); p.Status.Phase == crawlv1alpha1.PhaseReady || p.Status.IP != "" {
			t.Errorf("%s: phase %s at %q with its Secret unmarked; want not Ready, no address", name, p.Status.Phase, p.Status.IP)
		}
		if n := h.metrics.count(cache.NewObjectName(h.ns, name)); n != 0 {
			t.Errorf("%s: probed %d times with its Secret unmarked, want 0", name, n)
		}
	}
	for _, password := range []string{externalPassword, upstreamPassword} {
		if endpoint.saw(password) {
			t.Errorf("the endpoint received the password of an unmarked Secret (%q)", password)
		}
	}
	if !endpoint.saw(controlPassword) {
		t.Fatal("the endpoint never saw the control Proxy's password: the recorder records nothing")
	}
	for name, message := range refused {
		h.waitForCondition(name, crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, "CredentialsError", message)
		h.waitForEvent(name, "CredentialsError", message)
	}

	// Marking heals: both become Ready, and their passwords now arrive.
	h.setMark("ext-auth", true)
	h.setMark("vendor", true)
	healed := time.Now()
	for name := range refused {
		p, _ := h.waitForPhase(name, crawlv1alpha1.PhaseReady, healed, interval+slack)
		if c := meta.FindStatusCondition(p.Status.Conditions, crawlv1alpha1.ConditionProvisioned); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("%s: Provisioned %+v once marked, want True", name, c)
		}
	}
	for _, password := range []string{externalPassword, upstreamPassword} {
		if !endpoint.saw(password) {
			t.Errorf("the endpoint never received %q once its Secret was marked", password)
		}
	}

	// Taking the mark away takes the Secret out of use: the session's copy
	// of the password (its generated Secret) goes.
	h.setMark("vendor", false)
	h.waitForCondition("session", crawlv1alpha1.ConditionProvisioned, metav1.ConditionFalse, "CredentialsError", refused["session"])
	copyName := "proxy-auth-" + string(h.get("session").UID)
	eventually.Check(t, slack, 20*time.Millisecond, "the copy of the password deleted", eventually.Holds(func() (bool, string) {
		_, err := h.kube.CoreV1().Secrets(h.ns).Get(context.Background(), copyName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get %s: %v", copyName, err)
	}))
}

func splitAddr(t *testing.T, addr string) (string, int32) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var n int32
	if _, err := fmt.Sscan(port, &n); err != nil {
		t.Fatal(err)
	}
	return host, n
}

// createUnmarkedSecret creates a Secret without the label that lets
// Proxies use it, as every Secret was before it existed.
func (h *harness) createUnmarkedSecret(name string, data map[string]string) {
	h.t.Helper()
	if _, err := h.kube.CoreV1().Secrets(h.ns).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data,
	}, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// setMark adds the label, as the condition's message says to, or removes it.
func (h *harness) setMark(name string, marked bool) {
	h.t.Helper()
	value := "null"
	if marked {
		value = `"true"`
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, proxyCredentialsLabel, value)
	if _, err := h.kube.CoreV1().Secrets(h.ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) waitForCondition(name, condType string, status metav1.ConditionStatus, reason, message string) {
	h.t.Helper()
	eventually.Check(h.t, slack, 20*time.Millisecond, name+" "+condType+"="+string(status)+"/"+reason, eventually.Holds(func() (bool, string) {
		c := meta.FindStatusCondition(h.get(name).Status.Conditions, condType)
		if c == nil {
			return false, "no condition"
		}
		return c.Status == status && c.Reason == reason && c.Message == message, fmt.Sprintf("%s/%s: %s", c.Status, c.Reason, c.Message)
	}))
}

func (h *harness) waitForEvent(name, reason, message string) {
	h.t.Helper()
	eventually.Check(h.t, slack, 50*time.Millisecond, "event "+reason+" on "+name, eventually.Holds(func() (bool, string) {
		events, err := h.kube.CoreV1().Events(h.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range events.Items {
			if e.InvolvedObject.Name == name && e.Type == corev1.EventTypeWarning && e.Reason == reason && e.Message == message {
				return true, ""
			}
			seen = append(seen, e.InvolvedObject.Name+" "+e.Reason+": "+e.Message)
		}
		return false, fmt.Sprintf("events %q", seen)
	}))
}

// recordingProxy is a forward proxy on a real listener that records every
// byte it receives, and admits a request whose basic-auth password is one
// of those given (whatever the username: an upstream session's is rendered
// from its UID).
type recordingProxy struct {
	addr string
	mu   sync.Mutex
	got  bytes.Buffer
}

func startRecordingProxy(t *testing.T, passwords ...string) *recordingProxy {
	t.Helper()
	fp, err := forwardproxy.New(forwardproxy.Config{AllowCIDRs: []netip.Prefix{proxytest.Loopback}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingProxy{addr: ln.Addr().String()}
	srv := &http.Server{Handler: passwordGate(passwords, fp), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(&recordingListener{Listener: ln, r: r}) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = fp.Close()
	})
	return r
}

func (r *recordingProxy) record(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got.Write(b)
}

// basicCredentials finds the basic-auth credentials of a request's headers.
var basicCredentials = regexp.MustCompile(`(?i)authorization:\s*basic\s+([A-Za-z0-9+/=]+)`)

// saw reports whether password arrived in any form: as sent, or inside a
// basic-auth header.
func (r *recordingProxy) saw(password string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if bytes.Contains(r.got.Bytes(), []byte(password)) {
		return true
	}
	for _, m := range basicCredentials.FindAllSubmatch(r.got.Bytes(), -1) {
		if decoded, err := base64.StdEncoding.DecodeString(string(m[1])); err == nil && strings.Contains(string(decoded), password) {
			return true
		}
	}
	return false
}

type recordingListener struct {
	net.Listener
	r *recordingProxy
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, r: l.r}, nil
}

type recordingConn struct {
	net.Conn
	r *recordingProxy
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.r.record(p[:n])
	return n, err
}

// passwordGate answers 407 unless the request's basic-auth password is one
// of passwords.
func passwordGate(passwords []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, password, ok := (&http.Request{Header: http.Header{"Authorization": req.Header.Values("Proxy-Authorization")}}).BasicAuth()
		for _, p := range passwords {
			if ok && password == p {
				req.Header.Del("Proxy-Authorization")
				next.ServeHTTP(w, req)
				return
			}
		}
		w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
	})
}
