package testenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Files in Dir/pki.
const (
	caCertFile       = "ca.crt"
	caKeyFile        = "ca.key"
	serverCertFile   = "apiserver.crt"
	serverKeyFile    = "apiserver.key"
	adminCertFile    = "admin.crt"
	adminKeyFile     = "admin.key"
	saPrivateKeyFile = "sa.key"
	saPublicKeyFile  = "sa.pub"
)

// certValidity is long enough for a kept Dir (make run) to be reused for years;
// renewMargin regenerates everything when a certificate gets close to its end.
const (
	certValidity = 10 * 365 * 24 * time.Hour
	renewMargin  = 24 * time.Hour
)

// pki is what clients need of the certificates in Dir/pki; the API server reads the
// rest from the files.
type pki struct {
	caCert    []byte // PEM
	adminCert []byte // PEM
	adminKey  []byte // PEM
}

// ensurePKI reuses the certificates and keys in dir when all are present and valid,
// else generates a new set: a CA, a serving certificate for 127.0.0.1 and localhost,
// an admin client certificate in system:masters and the ServiceAccount key pair.
func ensurePKI(dir string) (*pki, error) {
	if p, err := loadPKI(dir); err == nil {
		return p, nil
	}
	if err := generatePKI(dir); err != nil {
		return nil, fmt.Errorf("generating certificates in %s: %w", dir, err)
	}
	p, err := loadPKI(dir)
	if err != nil {
		return nil, fmt.Errorf("reading generated certificates: %w", err)
	}
	return p, nil
}

func loadPKI(dir string) (*pki, error) {
	files := map[string][]byte{}
	for _, name := range []string{caCertFile, caKeyFile, serverCertFile, serverKeyFile, adminCertFile, adminKeyFile, saPrivateKeyFile, saPublicKeyFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		files[name] = b
	}
	certs := map[string]*x509.Certificate{}
	for _, name := range []string{caCertFile, serverCertFile, adminCertFile} {
		block, _ := pem.Decode(files[name])
		if block == nil {
			return nil, fmt.Errorf("%s: no PEM block", name)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if time.Now().Add(renewMargin).After(cert.NotAfter) {
			return nil, fmt.Errorf("%s: expires %s", name, cert.NotAfter)
		}
		certs[name] = cert
	}
	// A set left half-written by an interrupted generatePKI mixes two CAs.
	for _, name := range []string{serverCertFile, adminCertFile} {
		if err := certs[name].CheckSignatureFrom(certs[caCertFile]); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return &pki{caCert: files[caCertFile], adminCert: files[adminCertFile], adminKey: files[adminKeyFile]}, nil
}

func generatePKI(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTemplate := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "testenv-ca"},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew between processes
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := signCert(caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}

	leaf := func(subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		der, err := signCert(&x509.Certificate{
			Subject:     subject,
			NotBefore:   now.Add(-time.Hour),
			NotAfter:    now.Add(certValidity),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage},
			DNSNames:    dns,
			IPAddresses: ips,
		}, ca, key.Public(), caKey)
		return der, key, err
	}
	serverDER, serverKey, err := leaf(pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback})
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	// The API server maps a client certificate's CN to the user and O to groups.
	adminDER, adminKey, err := leaf(pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}}, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return fmt.Errorf("admin certificate: %w", err)
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("ServiceAccount key: %w", err)
	}

	var files []fileContent
	for _, c := range []struct {
		certFile, keyFile string
		der               []byte
		key               crypto.Signer
	}{
		{caCertFile, caKeyFile, caDER, caKey},
		{serverCertFile, serverKeyFile, serverDER, serverKey},
		{adminCertFile, adminKeyFile, adminDER, adminKey},
	} {
		keyPEM, err := privateKeyPEM(c.key)
		if err != nil {
			return err
		}
		files = append(files,
			fileContent{c.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.der})},
			fileContent{c.keyFile, keyPEM})
	}
	saPrivate, err := privateKeyPEM(saKey)
	if err != nil {
		return err
	}
	saPublicDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	files = append(files,
		fileContent{saPrivateKeyFile, saPrivate},
		fileContent{saPublicKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPublicDER})})

	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

type fileContent struct {
	name string
	data []byte
}

func signCert(template, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	template.SerialNumber = serial
	return x509.CreateCertificate(rand.Reader, template, parent, pub, signer)
}

func privateKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
