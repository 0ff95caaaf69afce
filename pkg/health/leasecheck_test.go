package health

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/forwardproxy"
	"github.com/proxyfleet/proxy-operator/pkg/leasecred"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/session"
	"github.com/proxyfleet/proxy-operator/pkg/proxyaccess"
	"github.com/proxyfleet/proxy-operator/pkg/testing/proxytest"
)

// sessionOf makes the proxy a session of the instance whose credentials
// Secret is secret.
func sessionOf(secret string) proxyOption {
	return func(p *crawlv1alpha1.Proxy) {
		p.Spec.Mode, p.Spec.Endpoint, p.Spec.Provider = crawlv1alpha1.ModeManaged, nil, crawlv1alpha1.ProviderSession
		p.Spec.Session = &crawlv1alpha1.SessionProvider{Instance: "i1", CredentialsSecretRef: crawlv1alpha1.LocalSecretRef{Name: secret}}
	}
}

func ranged() proxyOption {
	return func(p *crawlv1alpha1.Proxy) { p.Status.ExitRanges = []string{"fd00:5e55:1::/64"} }
}

// TestProbesSignForSessionsAndRangedInstances: the probe of a session, or
// of an instance with exit ranges, authenticates with a credential of no
// lease signed with the Secret's lease key, for the session's username;
// any other probe with the static password. The instance's answer naming
// the key makes the verdict LeaseChecked.
func TestProbesSignForSessionsAndRangedInstances(t *testing.T) {
	keyText, err := leasecred.NewKeyText()
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := leasecred.ParseKeys(keyText)
	secret := func(withKey bool) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "inst", Labels: markedForProxies},
			Data:       map[string][]byte{"username": []byte("px"), "password": []byte("static-pw")},
		}
		if withKey {
			s.Data[leasecred.SecretKey] = []byte(keyText)
		}
		return s
	}
	type want struct {
		User   string
		Signed bool
		Lease  LeaseCheck
	}
	for name, tc := range map[string]struct {
		opts      []proxyOption
		withKey   bool
		announced string
		want      want
	}{
		"a session, the instance checks": {
			opts: []proxyOption{sessionOf("inst")}, withKey: true, announced: keys[0].ID(),
			want: want{User: "px+session-" + proxyaccess.SessionID("p-uid-1"), Signed: true, Lease: LeaseChecked},
		},
		"a ranged instance": {
			opts: []proxyOption{withAuth("inst"), ranged()}, withKey: true, announced: keys[0].ID(),
			want: want{User: "px", Signed: true, Lease: LeaseChecked},
		},
		"a one-exit instance that checks": {
			opts: []proxyOption{withAuth("inst")}, withKey: true, announced: "0badc0de," + keys[0].ID(),
			want: want{User: "px", Lease: LeaseChecked},
		},
		"a one-exit instance that does not (squid)": {
			opts: []proxyOption{withAuth("inst")}, withKey: true,
			want: want{User: "px", Lease: LeaseNotChecked},
		},
		"an instance with another key": {
			opts: []proxyOption{withAuth("inst")}, withKey: true, announced: "0badc0de",
			want: want{User: "px", Lease: LeaseNotChecked},
		},
		"no key in the Secret": {
			opts: []proxyOption{withAuth("inst"), ranged()}, announced: keys[0].ID(),
			want: want{User: "px", Lease: LeaseNoKey},
		},
		"a session of an instance without a key": {
			opts: []proxyOption{sessionOf("inst")},
			want: want{User: "px+session-" + proxyaccess.SessionID("p-uid-1"), Lease: LeaseNoKey},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, testProxy("p", append(tc.opts, withThresholds(1, 1))...))
			f.engine.providers = provider.Set{crawlv1alpha1.ProviderSession: session.New()}
			f.engine.secrets = func(_ context.Context, _, name string) (*corev1.Secret, error) {
				if name != "inst" {
					t.Errorf("read Secret %q, want inst", name)
				}
				return secret(tc.withKey), nil
			}
			var got want
			f.engine.probe = func(_ context.Context, target Target) Result {
				if target.Proxy.User == nil {
					return failure("refused") // the anonymous probe of a Managed instance
				}
				got.User = target.Proxy.User.Username()
				pass, _ := target.Proxy.User.Password()
				if c, err := leasecred.Verify(keys, got.User, pass); err == nil {
					got.Signed = true
					if !c.Ref.IsZero() {
						t.Errorf("the probe's credential names lease %v", c.Ref)
					}
					if left := c.End.Sub(f.clock.Now()); left < time.Minute || left > 2*time.Minute {
						t.Errorf("the probe's credential ends in %v, want the timeout plus a minute", left)
					}
				} else if pass != "static-pw" {
					t.Errorf("the probe's password is neither static nor signed")
				}
				r := success(time.Millisecond)
				r.AnnouncedKeys = tc.announced
				return r
			}
			f.tick()
			f.checkDue(testInterval)
			v, ok := f.verdict("p")
			if !ok || !v.Healthy {
				t.Fatalf("verdict %+v, want healthy", v)
			}
			got.Lease = v.Lease
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("probe (-want +got):\n%s", diff)
			}
		})
	}
}

// TestALeaseCheckChangeIsReported: an instance that stops naming the key
// (replaced by one that does not check) is reported at once.
func TestALeaseCheckChangeIsReported(t *testing.T) {
	keyText, _ := leasecred.NewKeyText()
	keys, _ := leasecred.ParseKeys(keyText)
	f := newFixture(t, testProxy("p", withAuth("inst"), withThresholds(1, 1)))
	f.engine.secrets = func(context.Context, string, string) (*corev1.Secret, error) {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "inst", Labels: markedForProxies},
			Data: map[string][]byte{"username": []byte("px"), "password": []byte("pw"), leasecred.SecretKey: []byte(keyText)}}, nil
	}
	announced := keys[0].ID()
	f.engine.probe = func(context.Context, Target) Result {
		r := success(time.Millisecond)
		r.AnnouncedKeys = announced
		return r
	}
	f.tick()
	f.checkDue(testInterval)
	if v, _ := f.verdict("p"); v.Lease != LeaseChecked {
		t.Fatalf("first verdict %q, want %q", v.Lease, LeaseChecked)
	}
	before := f.enqueues("p")
	announced = ""
	f.checkDue(testInterval)
	if v, _ := f.verdict("p"); v.Lease != LeaseNotChecked || f.enqueues("p") != before+1 {
		t.Errorf("verdict %q after %d reports, want %q reported once more", v.Lease, f.enqueues("p")-before, LeaseNotChecked)
	}
	if f.metrics.reports[reportLease] != 1 {
		t.Errorf("reports %v, want one %s", f.metrics.reports, reportLease)
	}
}

// TestProbeReadsTheAnnouncedKeys: through a real forward-proxy with a
// lease key, a probe of an http target (the forwarded answer) and of an
// https one (the CONNECT answer) reads the key's ID.
func TestProbeReadsTheAnnouncedKeys(t *testing.T) {
	keyText, _ := leasecred.NewKeyText()
	keys, _ := leasecred.ParseKeys(keyText)
	p := proxytest.StartInProcess(t, proxytest.Options{Username: probeUser, Password: probePass, Configure: func(c *forwardproxy.Config) {
		c.LeaseKeys = keys
	}})
	plain := proxytest.StartHTTPTarget(t)
	tlsTarget := proxytest.StartHTTPSTarget(t)
	for name, target := range map[string]Target{
		"http":  {URL: plain.URL + "/generate_204"},
		"https": {URL: tlsTarget.URL + "/generate_204", RootCAs: proxytest.RootCAs(tlsTarget)},
	} {
		t.Run(name, func(t *testing.T) {
			target.Proxy = &url.URL{Scheme: "http", Host: p.Addr, User: url.UserPassword(probeUser, probePass)}
			target.ExpectedStatus, target.Timeout = 204, 5*time.Second
			r := Probe(context.Background(), target)
			if !r.OK || r.AnnouncedKeys != keys[0].ID() {
				t.Errorf("probe %+v, want OK naming key %s", r, keys[0].ID())
			}
		})
	}
}

// TestANewLeaderSeedsTheLeaseCheck: a proxy whose status already says
// what its probe finds (a new leader's engine meeting the fleet) costs no
// status write; one whose status predates LeaseBound is written once.
func TestANewLeaderSeedsTheLeaseCheck(t *testing.T) {
	keyText, _ := leasecred.NewKeyText()
	keys, _ := leasecred.ParseKeys(keyText)
	for name, tc := range map[string]struct {
		condition   *metav1.Condition
		wantReports int
	}{
		"LeaseBound in the status": {condition: &metav1.Condition{Type: crawlv1alpha1.ConditionLeaseBound, Status: metav1.ConditionTrue, Reason: string(LeaseChecked)}},
		"from before LeaseBound":   {wantReports: 1},
	} {
		t.Run(name, func(t *testing.T) {
			p := testProxy("p", withAuth("inst"), withThresholds(1, 1), withHealthyCondition(metav1.ConditionTrue, "ok", time.Millisecond, t0))
			if tc.condition != nil {
				p.Status.Conditions = append(p.Status.Conditions, *tc.condition)
			}
			f := newFixture(t, p)
			f.engine.secrets = func(context.Context, string, string) (*corev1.Secret, error) {
				return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "inst", Labels: markedForProxies},
					Data: map[string][]byte{"username": []byte("px"), "password": []byte("pw"), leasecred.SecretKey: []byte(keyText)}}, nil
			}
			f.engine.probe = func(context.Context, Target) Result {
				r := success(time.Millisecond)
				r.AnnouncedKeys = keys[0].ID()
				return r
			}
			f.tick()
			f.checkDue(testInterval)
			if got := f.enqueues("p"); got != tc.wantReports {
				t.Errorf("%d reports, want %d", got, tc.wantReports)
			}
		})
	}
}
