package replica

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// The peers' certificate authority: the operator keeps it in a Secret only
// the replicas read (as it keeps the lease ID key), and each replica issues
// itself a certificate from it at start. A peer is whoever presents a
// certificate of this CA: the CA's key is what lets replicas vouch for a
// caller's identity when they forward its lease calls, so no other
// component (the gateway included) may read it.

// PeerServerName is the name every peer certificate carries and every peer
// checks: the peers are equals, told apart by their Raft IDs, not names.
const PeerServerName = "peers.proxy-operator.crawl.proxyfleet.io"

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	peerValidity = 365 * 24 * time.Hour
)

// CA is the peers' certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a CA valid from now for ten years.
func NewCA(now time.Time) (CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return CA{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "proxy-operator peers CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(caValidity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return CA{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return CA{}, err
	}
	return ParseCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// ParseCA reads a CA from its PEM certificate and key.
func ParseCA(certPEM, keyPEM []byte) (CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return CA{}, errors.New("peers CA: no PEM certificate or key")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return CA{}, fmt.Errorf("peers CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return CA{}, fmt.Errorf("peers CA key: %w", err)
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return CA{}, errors.New("peers CA: the key is not the certificate's, or the certificate is no CA")
	}
	return CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// PeerTLS issues a certificate for the replica id and returns the peer
// port's TLS configuration: that certificate for both ends, the CA as the
// only root and client CA, client certificates required.
func (ca CA) PeerTLS(id string, now time.Time) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: id},
		DNSNames:  []string{PeerServerName},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(peerValidity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ServerName:   PeerServerName,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
