package main

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

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// identity is one client certificate: who a component is to the API server
// (CN is the user, O the groups) and the kubeconfig it gets.
type identity struct {
	user, cn string
	groups   []string
}

// identities: the names the API server's default RBAC roles and the Node
// authorizer expect (kubeadm uses the same).
func (n node) identities() []identity {
	return []identity{
		{"admin", "kubernetes-admin", []string{"system:masters"}},
		{"kubelet", "system:node:" + n.Name, []string{"system:nodes"}},
		{"kube-controller-manager", "system:kube-controller-manager", nil},
		{"kube-scheduler", "system:kube-scheduler", nil},
		{"kube-proxy", "system:kube-proxy", nil},
		// Bound to its ClusterRole by the node's addons (addons.go).
		{"kube-router", "system:kube-router", nil},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}},
	}
}

// writePKI writes a fresh CA, the serving certificates of the API server and the
// kubelet, a client certificate and kubeconfig per identity, and the
// ServiceAccount key pair. A new node gets new keys: down removes the folder.
func writePKI(n node) error {
	if err := os.MkdirAll(n.path("pki"), 0o700); err != nil {
		return err
	}
	ca, err := newCA()
	if err != nil {
		return err
	}
	if err := ca.write(n.pki("ca")); err != nil {
		return err
	}
	serving := []struct {
		name string
		dns  []string
		ips  []net.IP
	}{
		{"apiserver", []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			[]net.IP{net.IP(n.IP.AsSlice()), net.IPv4(127, 0, 0, 1), net.IP(n.serviceIP().AsSlice())}},
		{"kubelet-serving", []string{n.Name, "localhost"}, []net.IP{net.IP(n.IP.AsSlice()), net.IPv4(127, 0, 0, 1)}},
	}
	for _, s := range serving {
		c, err := ca.sign(pkix.Name{CommonName: s.name}, x509.ExtKeyUsageServerAuth, s.dns, s.ips)
		if err != nil {
			return fmt.Errorf("%s serving certificate: %w", s.name, err)
		}
		if err := c.write(n.pki(s.name)); err != nil {
			return err
		}
	}
	for _, id := range n.identities() {
		c, err := ca.sign(pkix.Name{CommonName: id.cn, Organization: id.groups}, x509.ExtKeyUsageClientAuth, nil, nil)
		if err != nil {
			return fmt.Errorf("%s client certificate: %w", id.user, err)
		}
		if err := c.write(n.pki(id.user)); err != nil {
			return err
		}
		if err := writeKubeconfig(n, id.user, ca.certPEM, c); err != nil {
			return err
		}
	}
	return writeServiceAccountKeys(n)
}

func writeKubeconfig(n node, user string, caPEM []byte, c *keyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy-operator-node"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://%s", netJoin(n.IP.String(), n.APIPort)),
		CertificateAuthorityData: caPEM,
	}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: c.certPEM, ClientKeyData: c.keyPEM}
	cfg.Contexts["proxy-operator-node"] = &clientcmdapi.Context{Cluster: "proxy-operator-node", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "proxy-operator-node"
	path := n.kubeconfig(user)
	if user == "admin" {
		path = n.AdminKubeconfig()
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func netJoin(host string, port int) string { return net.JoinHostPort(host, fmt.Sprint(port)) }

type keyPair struct {
	cert            *x509.Certificate
	key             crypto.Signer
	certPEM, keyPEM []byte
}

func (k *keyPair) write(base string) error {
	if err := os.WriteFile(base+".crt", k.certPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(base+".key", k.keyPEM, 0o600)
}

func newCA() (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "proxy-operator-node-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return newKeyPair(tmpl, nil, key)
}

func (ca *keyPair) sign(subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return newKeyPair(&x509.Certificate{
		Subject:     subject,
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames:    dns,
		IPAddresses: ips,
	}, ca, key)
}

// newKeyPair signs tmpl with parent's key (itself when parent is nil).
func newKeyPair(tmpl *x509.Certificate, parent *keyPair, key *ecdsa.PrivateKey) (*keyPair, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	parentCert, signer := tmpl, crypto.Signer(key)
	if parent != nil {
		parentCert, signer = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parentCert, key.Public(), signer)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func writeServiceAccountKeys(n node) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.pki("sa.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(n.pki("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}
