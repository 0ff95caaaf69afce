// Package inspection is what TLS inspection needs of certificates: a
// certificate authority per inspected namespace (made, encoded, rotated
// with an overlap) and the leaf certificates the gateway presents to a
// crawler for each host it inspects, minted on demand from the current CA
// and kept in a bounded cache. It holds no Kubernetes I/O and no network
// I/O: the operator keeps the CAs in Secrets (pkg/inspectionca) and the
// gateway reads them (docs/inspection.md).
package inspection

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Defaults of a CA's life.
const (
	// DefaultCAValidity is how long a CA is valid.
	DefaultCAValidity = 365 * 24 * time.Hour
	// DefaultRotateBefore is how long before its end a CA is replaced;
	// both are trusted meanwhile (the overlap), so a crawler that reloads
	// the published bundle within it never sees an untrusted leaf.
	DefaultRotateBefore = 30 * 24 * time.Hour
)

// CA is one certificate authority: its certificate and its private key.
// The key is secret: never log it or put it anywhere a tenant can read.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// NewCA makes a CA for namespace, valid from now (less a minute, for
// clocks a little behind) for validity.
func NewCA(namespace string, now time.Time, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("inspection: generating a CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			Organization: []string{"proxy-operator"},
			CommonName:   "proxy-operator inspection CA for namespace " + namespace,
		},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // it signs leaves only
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("inspection: signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// DueForRotation: the CA ends within rotateBefore of now.
func (ca *CA) DueForRotation(now time.Time, rotateBefore time.Duration) bool {
	return !now.Before(ca.Cert.NotAfter.Add(-rotateBefore))
}

// CertPEM is the CA's certificate, PEM-encoded: what tenants trust.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM is the CA's private key, PEM-encoded (PKCS #8). Secret.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("inspection: encoding the CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseCA reads a CA from its PEM certificate and key, and checks that they
// belong together and that the certificate is a CA's. Errors never quote
// the key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("inspection: the CA certificate is not a PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("inspection: the CA certificate: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, errors.New("inspection: the CA key is not a PEM PRIVATE KEY")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, errors.New("inspection: the CA key does not parse as PKCS #8")
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("inspection: the CA key is not an ECDSA key")
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("inspection: the CA certificate is not a CA's, or not the key's")
	}
	return &CA{Cert: cert, Key: key}, nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("inspection: a serial number: %w", err)
	}
	return serial, nil
}
