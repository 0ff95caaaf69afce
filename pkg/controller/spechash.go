package controller

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
	"github.com/proxyfleet/proxy-operator/pkg/provider"
)

// specHash identifies the instance a spec, its resolved cloud-init and its
// credentials' digest make: a JSON object of what an instance is built
// from, hashed. healthCheck and maxLeases are left out: changing how a
// proxy is probed or shared never needs a new instance. The provider
// blocks in it are those the registry declares, each with what of it its
// provider hashes (provider.SpecBlock), in the registry's order.
//
// The encoding is the one a struct of these fields had before providers
// registered themselves, byte for byte, so that an upgrade replaces no
// instance (TestSpecHashesArePinned): keys in this order, absent values
// left out, and spec.session, which came after spec.endpoint, now before
// it, which changes nothing since the CRD never admits both.
func specHash(registry provider.Registry, spec crawlv1alpha1.ProxySpec, cloudInit []byte, credentialsDigest string) string {
	var h hashInput
	h.add("mode", spec.Mode, true)
	h.add("provider", spec.Provider, spec.Provider != "")
	for _, reg := range registry {
		v, ok := reg.Block.HashedValue(&spec)
		h.add(reg.Block.Field, v, ok)
	}
	h.add("endpoint", spec.Endpoint, spec.Endpoint != nil)
	h.add("auth", spec.Auth, spec.Auth != nil)
	// Egress is passed to the instance as flags: a change replaces it.
	h.add("egress", spec.Egress, spec.Egress != nil)
	// The digest of the resolved content, whether inline or from a Secret,
	// so rotating the Secret replaces the instance.
	if cloudInit != nil {
		sum := sha256.Sum256(cloudInit)
		h.add("cloudInit", hex.EncodeToString(sum[:]), true)
	}
	// The digest of the spec.auth Secret's content (instances are
	// configured with the credentials, so rotating them replaces it);
	// already a digest: the Secret's content never reaches the hash input.
	h.add("credentials", credentialsDigest, credentialsDigest != "")
	sum := sha256.Sum256(h.bytes())
	return hex.EncodeToString(sum[:8])
}

// hashInput is a JSON object written key by key, in the order of the
// calls, as encoding/json writes a struct's fields (map keys, inside the
// values, it sorts).
type hashInput struct{ buf bytes.Buffer }

// add writes key: value when present is true.
func (h *hashInput) add(key string, value any, present bool) {
	if !present {
		return
	}
	if h.buf.Len() == 0 {
		h.buf.WriteByte('{')
	} else {
		h.buf.WriteByte(',')
	}
	k, _ := json.Marshal(key)
	v, err := json.Marshal(value)
	if err != nil {
		panic("specHash: " + err.Error()) // plain structs of strings and numbers always encode
	}
	h.buf.Write(k)
	h.buf.WriteByte(':')
	h.buf.Write(v)
}

func (h *hashInput) bytes() []byte {
	if h.buf.Len() == 0 {
		return []byte("{}")
	}
	return append(h.buf.Bytes(), '}')
}
