package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// hashedSpec is what an instance is built from. healthCheck and maxLeases are
// left out: changing how a proxy is probed or shared never needs a new
// instance. Field order is fixed by the struct, and encoding/json sorts map
// keys, so the encoding (and the hash) is stable.
type hashedSpec struct {
	Mode       crawlv1alpha1.ProxyMode           `json:"mode"`
	Provider   crawlv1alpha1.ProviderName        `json:"provider,omitempty"`
	Kubernetes *crawlv1alpha1.KubernetesProvider `json:"kubernetes,omitempty"`
	Local      *crawlv1alpha1.LocalProvider      `json:"local,omitempty"`
	GCE        *crawlv1alpha1.GCEProvider        `json:"gce,omitempty"`
	AWS        *crawlv1alpha1.AWSProvider        `json:"aws,omitempty"`
	// Hetzner: omitempty keeps the hash of every other spec unchanged.
	Hetzner *crawlv1alpha1.HetznerProvider `json:"hetzner,omitempty"`
	// DigitalOcean: omitempty keeps the hash of every other spec unchanged.
	DigitalOcean *crawlv1alpha1.DigitalOceanProvider `json:"digitalocean,omitempty"`
	// Azure: omitempty keeps the hash of every other spec unchanged.
	Azure    *crawlv1alpha1.AzureProvider `json:"azure,omitempty"`
	Endpoint *crawlv1alpha1.Endpoint      `json:"endpoint,omitempty"`
	// Session: omitempty keeps the hash of every other spec unchanged.
	Session *crawlv1alpha1.SessionProvider `json:"session,omitempty"`
	Auth    *crawlv1alpha1.ProxyAuth       `json:"auth,omitempty"`
	// Egress is passed to the instance as flags: a change replaces it.
	// omitempty keeps the hash of every spec without it unchanged.
	Egress *crawlv1alpha1.ProxyEgress `json:"egress,omitempty"`
	// CloudInit is the digest of the resolved content, whether inline or from
	// a Secret, so rotating the Secret replaces the instance.
	CloudInit string `json:"cloudInit,omitempty"`
	// Credentials is the digest of the spec.auth Secret's content: instances
	// are configured with the credentials, so rotating them replaces it.
	Credentials string `json:"credentials,omitempty"`
}

// specHash identifies the instance a spec, its resolved cloud-init and its
// credentials' digest make.
func specHash(spec crawlv1alpha1.ProxySpec, cloudInit []byte, credentialsDigest string) string {
	h := hashedSpec{
		Mode:         spec.Mode,
		Provider:     spec.Provider,
		Kubernetes:   spec.Kubernetes,
		Local:        spec.Local,
		GCE:          spec.GCE,
		AWS:          spec.AWS,
		Hetzner:      spec.Hetzner,
		DigitalOcean: spec.DigitalOcean,
		Azure:        spec.Azure,
		Endpoint:     spec.Endpoint,
		Session:      spec.Session,
		Auth:         spec.Auth,
		Egress:       spec.Egress,
		// Already a digest: the Secret's content never reaches the hash input.
		Credentials: credentialsDigest,
	}
	if cloudInit != nil {
		sum := sha256.Sum256(cloudInit)
		h.CloudInit = hex.EncodeToString(sum[:])
	}
	data, err := json.Marshal(h)
	if err != nil {
		panic("specHash: " + err.Error()) // plain structs of strings and numbers always encode
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
