package inspection

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proxyfleet/proxy-operator/pkg/testing/integration"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

func newTestCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA("crawlers", t0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestCAEncodesAndParses(t *testing.T) {
	ca := newTestCA(t)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCA(ca.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Cert.Equal(ca.Cert) || !back.Key.Equal(ca.Key) {
		t.Error("ParseCA(encoded) is not the CA")
	}
	if !strings.Contains(ca.Cert.Subject.CommonName, "crawlers") || !ca.Cert.IsCA || ca.Cert.NotAfter != t0.Add(DefaultCAValidity).Truncate(time.Second) {
		t.Errorf("CA certificate %q, CA %v, not after %v", ca.Cert.Subject.CommonName, ca.Cert.IsCA, ca.Cert.NotAfter)
	}

	other := newTestCA(t)
	otherKey, _ := other.KeyPEM()
	for name, tc := range map[string]struct{ cert, key []byte }{
		"another CA's key": {ca.CertPEM(), otherKey},
		"no certificate":   {[]byte("junk"), keyPEM},
		"no key":           {ca.CertPEM(), []byte("junk")},
		"key as cert":      {keyPEM, keyPEM},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseCA(tc.cert, tc.key)
			if err == nil {
				t.Fatal("ParseCA accepted it")
			}
			if bytes.Contains([]byte(err.Error()), keyPEM[30:60]) {
				t.Errorf("the error quotes the key: %v", err)
			}
		})
	}
}

func TestDueForRotation(t *testing.T) {
	ca := newTestCA(t)
	end := ca.Cert.NotAfter
	for _, tc := range []struct {
		now  time.Time
		want bool
	}{
		{t0, false},
		{end.Add(-DefaultRotateBefore - time.Hour), false},
		{end.Add(-DefaultRotateBefore), true},
		{end.Add(time.Hour), true},
	} {
		if got := ca.DueForRotation(tc.now, DefaultRotateBefore); got != tc.want {
			t.Errorf("DueForRotation(%v) = %v, want %v", tc.now, got, tc.want)
		}
	}
}

// A TLS client that trusts the CA accepts the minted leaf for the host it
// asked for, and only for it; one that does not trust it refuses.
func TestLeafIsTrustedThroughTheCA(t *testing.T) {
	// The real clock: the handshake checks the validity against it.
	ca, err := NewCA("crawlers", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMinter(ca, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	trusting := x509.NewCertPool()
	trusting.AddCert(ca.Cert)
	for _, tc := range []struct {
		name, serverName string
		roots            *x509.CertPool
		wantErr          string
	}{
		{"trusted, DNS name", "shop.example.com", trusting, ""},
		{"trusted, IP", "127.0.0.1", trusting, ""},
		{"not trusted", "shop.example.com", x509.NewCertPool(), "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := handshake(t, m, tc.serverName, tc.roots)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("handshake = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// handshake runs a TLS handshake over loopback TCP (a net.Pipe has no
// buffer: a client refusing while the server writes would deadlock) between
// a server presenting m's leaves and a client asking for serverName.
func handshake(t *testing.T, m *Minter, serverName string, roots *x509.CertPool) error {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		name := hello.ServerName
		if name == "" {
			name = "127.0.0.1" // an IP target sends no SNI
		}
		return m.Leaf(name)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := l.Accept()
		if err == nil {
			err = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
		done <- err
	}()
	c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{ServerName: serverName, RootCAs: roots})
	if err == nil {
		c.Close()
	}
	<-done
	return err
}

func TestLeafCacheIsBoundedAndFresh(t *testing.T) {
	ca := newTestCA(t)
	now := t0
	m, err := NewMinter(ca, 50, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	first, err := m.Leaf("a.example")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := m.Leaf("a.example"); again != first {
		t.Error("a fresh leaf was minted again")
	}
	for i := range 500 {
		if _, err := m.Leaf(fmt.Sprintf("h%d.example", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Len(); n != 50 {
		t.Errorf("cache holds %d leaves, want the bound 50", n)
	}
	// Half its life gone: minted again.
	recent, _ := m.Leaf("h499.example")
	now = now.Add(leafValidity/2 + time.Minute)
	if again, _ := m.Leaf("h499.example"); again == recent {
		t.Error("a leaf past half its life was served again")
	}
}

func TestLeafNeverOutlivesItsCA(t *testing.T) {
	ca, err := NewCA("crawlers", t0, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := NewMinter(ca, 0, func() time.Time { return t0.Add(24 * time.Hour) })
	leaf, err := m.Leaf("a.example")
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Leaf.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("leaf ends %v, after its CA's %v", leaf.Leaf.NotAfter, ca.Cert.NotAfter)
	}
}

func TestCASetRotatesWithAnOverlap(t *testing.T) {
	first := CASet{Current: newTestCA(t)}
	rotateAt := first.Current.Cert.NotAfter.Add(-DefaultRotateBefore)
	rotated, err := first.Rotated("crawlers", rotateAt, 0)
	if err != nil {
		t.Fatal(err)
	}
	data, err := rotated.SecretData()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseSecretData(data)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Current.Cert.Equal(rotated.Current.Cert) || !back.Previous.Equal(first.Current.Cert) {
		t.Fatal("ParseSecretData(SecretData()) is not the set")
	}
	// During the overlap both are trusted; once the old one ends, only the new.
	pool := func(bundle []byte) int {
		n := 0
		for rest := bundle; ; n++ {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				return n
			}
		}
	}
	if n := pool(back.Bundle(rotateAt)); n != 2 {
		t.Errorf("bundle during the overlap holds %d certificates, want 2", n)
	}
	after := first.Current.Cert.NotAfter.Add(time.Second)
	if n := pool(back.Bundle(after)); n != 1 {
		t.Errorf("bundle after the old CA ended holds %d certificates, want 1", n)
	}
	if back.Pruned(after).Previous != nil || back.Pruned(rotateAt).Previous == nil {
		t.Error("Pruned drops the previous certificate at the wrong time")
	}
	if bytes.Contains(back.Bundle(rotateAt), []byte("PRIVATE KEY")) {
		t.Error("the bundle holds a private key")
	}
}

// TestLeafCacheStaysBoundedUnderManyHosts: a crawl of many distinct hosts
// through one namespace keeps the default cache at its bound. CI crawls
// twice the bound, so that every leaf of the first pass is evicted; the
// long variant (`make chaos`) 100,000 hosts, as docs/inspection.md says
// (issue 65: each host mints a leaf, 200 s under -race on a busy CI
// machine).
func TestLeafCacheStaysBoundedUnderManyHosts(t *testing.T) {
	m, err := NewMinter(newTestCA(t), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	hosts := integration.Scaled(2*DefaultMaxLeaves, 100_000)
	for i := range hosts {
		if _, err := m.Leaf(fmt.Sprintf("h%d.example", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Len(); n != DefaultMaxLeaves {
		t.Errorf("cache holds %d leaves after %d hosts, want the bound %d", n, hosts, DefaultMaxLeaves)
	}
}
