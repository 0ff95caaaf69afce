package inspection

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// How inspected namespaces and their CAs are named in the cluster; the CA
// controller (pkg/inspectionca) writes them, the gateway reads them.
const (
	// NamespaceLabel, set to NamespaceLabelValue on a Namespace, opts it into
	// inspection: nothing else does.
	NamespaceLabel      = "crawl.proxyfleet.io/inspection"
	NamespaceLabelValue = "enabled"

	// CALabel marks the Secrets (in the operator's namespace) that hold a
	// namespace's CA, and the ConfigMaps (in the namespace) that publish it.
	CALabel = "crawl.proxyfleet.io/inspection-ca"
	// InspectedNamespaceLabel names the namespace a CA Secret is for.
	InspectedNamespaceLabel = "crawl.proxyfleet.io/inspected-namespace"

	// BundleConfigMap is the ConfigMap in an inspected namespace whose
	// BundleKey holds the certificates its crawlers trust: the current CA
	// and, during a rotation's overlap, the previous one.
	BundleConfigMap = "proxy-operator-inspection-ca"
	BundleKey       = "ca.crt"
)

// The keys of a CA Secret.
const (
	secretCert     = "tls.crt"
	secretKey      = "tls.key"
	secretPrevious = "previous.crt"
)

// SecretName is the name of namespace's CA Secret in the operator's
// namespace.
func SecretName(namespace string) string { return "inspection-ca-" + namespace }

// CASet is a namespace's CAs: the current one, which signs, and the
// previous one's certificate while it is still valid (the overlap).
type CASet struct {
	Current  *CA
	Previous *x509.Certificate
}

// SecretData encodes s for a Secret.
func (s CASet) SecretData() (map[string][]byte, error) {
	key, err := s.Current.KeyPEM()
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{secretCert: s.Current.CertPEM(), secretKey: key}
	if s.Previous != nil {
		data[secretPrevious] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Previous.Raw})
	}
	return data, nil
}

// ParseSecretData decodes a CA Secret's data. Errors never quote the key.
func ParseSecretData(data map[string][]byte) (CASet, error) {
	current, err := ParseCA(data[secretCert], data[secretKey])
	if err != nil {
		return CASet{}, err
	}
	set := CASet{Current: current}
	if raw, ok := data[secretPrevious]; ok {
		b, _ := pem.Decode(raw)
		if b == nil || b.Type != "CERTIFICATE" {
			return CASet{}, errors.New("inspection: the previous CA certificate is not a PEM CERTIFICATE")
		}
		if set.Previous, err = x509.ParseCertificate(b.Bytes); err != nil {
			return CASet{}, fmt.Errorf("inspection: the previous CA certificate: %w", err)
		}
	}
	return set, nil
}

// Bundle is what crawlers of the namespace trust, PEM: the current CA's
// certificate, then the previous one's while it is valid at now.
func (s CASet) Bundle(now time.Time) []byte {
	var b bytes.Buffer
	b.Write(s.Current.CertPEM())
	if s.Previous != nil && now.Before(s.Previous.NotAfter) {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: s.Previous.Raw})
	}
	return b.Bytes()
}

// Rotated is s after a rotation at now: a new current CA, the old one's
// certificate as the previous.
func (s CASet) Rotated(namespace string, now time.Time, validity time.Duration) (CASet, error) {
	next, err := NewCA(namespace, now, validity)
	if err != nil {
		return CASet{}, err
	}
	return CASet{Current: next, Previous: s.Current.Cert}, nil
}

// Pruned is s without a previous certificate that has expired at now.
func (s CASet) Pruned(now time.Time) CASet {
	if s.Previous != nil && !now.Before(s.Previous.NotAfter) {
		s.Previous = nil
	}
	return s
}
