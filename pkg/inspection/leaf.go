package inspection

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"sync"
	"time"
)

// DefaultMaxLeaves bounds a Minter's cache: a crawl that visits more hosts
// mints again, it never grows memory (a leaf is about 1 KiB).
const DefaultMaxLeaves = 10000

// leafValidity is how long a minted leaf is valid; it is re-minted when
// half of that is left, and never outlives its CA.
const leafValidity = 7 * 24 * time.Hour

// Minter mints the leaf certificates presented to crawlers, one per host,
// signed by one CA, and caches them (least recently used out). It is safe
// for concurrent use. All its leaves share one key pair: a host's leaf is
// then one signature, and the key is no more secret than the CA's.
type Minter struct {
	ca  *CA
	key *ecdsa.PrivateKey
	now func() time.Time
	max int

	mu     sync.Mutex
	leaves map[string]*list.Element // host → *leafEntry
	lru    *list.List
}

type leafEntry struct {
	host string
	cert *tls.Certificate
}

// NewMinter returns a Minter signing with ca that keeps at most maxLeaves
// (DefaultMaxLeaves for 0 or less); now is the clock (time.Now for nil).
func NewMinter(ca *CA, maxLeaves int, now func() time.Time) (*Minter, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("inspection: generating the leaf key: %w", err)
	}
	if maxLeaves <= 0 {
		maxLeaves = DefaultMaxLeaves
	}
	if now == nil {
		now = time.Now
	}
	return &Minter{ca: ca, key: key, now: now, max: maxLeaves, leaves: map[string]*list.Element{}, lru: list.New()}, nil
}

// CA is the Minter's CA.
func (m *Minter) CA() *CA { return m.ca }

// Len is how many leaves the cache holds.
func (m *Minter) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len()
}

// Leaf is host's certificate (a DNS name or an IP address), from the cache
// while it has more than half its life left, else minted.
func (m *Minter) Leaf(host string) (*tls.Certificate, error) {
	now := m.now()
	m.mu.Lock()
	if e, ok := m.leaves[host]; ok {
		entry := e.Value.(*leafEntry)
		if fresh(entry.cert.Leaf, now) {
			m.lru.MoveToFront(e)
			m.mu.Unlock()
			return entry.cert, nil
		}
	}
	m.mu.Unlock()

	cert, err := m.mint(host, now)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.leaves[host]; ok {
		m.lru.Remove(e)
	}
	m.leaves[host] = m.lru.PushFront(&leafEntry{host: host, cert: cert})
	for m.lru.Len() > m.max {
		oldest := m.lru.Back()
		m.lru.Remove(oldest)
		delete(m.leaves, oldest.Value.(*leafEntry).host)
	}
	return cert, nil
}

// fresh: more than half of the leaf's life is left.
func fresh(leaf *x509.Certificate, now time.Time) bool {
	half := leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
	return now.Before(half)
}

func (m *Minter) mint(host string, now time.Time) (*tls.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(m.ca.Cert.NotAfter) {
		notAfter = m.ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, m.ca.Cert, &m.key.PublicKey, m.ca.Key)
	if err != nil {
		return nil, fmt.Errorf("inspection: minting a certificate for %q: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: m.key, Leaf: leaf}, nil
}
