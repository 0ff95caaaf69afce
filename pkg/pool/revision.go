package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"

	crawlv1alpha1 "github.com/proxyfleet/proxy-operator/pkg/apis/crawl/v1alpha1"
)

// Revision identifies what a member made now would be: a hash of the
// template and of the content of the Secrets it references (the cloud-init
// key and the auth username and password). Secret content enters the hash
// only as a digest, and the revision is a label value: 10 hex characters.
func Revision(pool *crawlv1alpha1.ProxyPool, secrets corelisters.SecretLister) (string, error) {
	h := sha256.New()
	tmpl, err := json.Marshal(pool.Spec.Template)
	if err != nil {
		return "", fmt.Errorf("encoding spec.template: %w", err)
	}
	h.Write(tmpl)
	spec := &pool.Spec.Template.Spec
	if ci := spec.CloudInit; ci != nil && ci.SecretRef != nil {
		key := ci.SecretRef.Key
		if key == "" {
			key = "user-data"
		}
		data, err := secretData(secrets, pool.Namespace, ci.SecretRef.Name, "spec.template.spec.cloudInit.secretRef")
		if err != nil {
			return "", err
		}
		v, ok := data[key]
		if !ok {
			return "", fmt.Errorf("spec.template.spec.cloudInit.secretRef: Secret %q has no key %q", ci.SecretRef.Name, key)
		}
		writeDigest(h, "cloud-init", v)
	}
	if a := spec.Auth; a != nil {
		data, err := secretData(secrets, pool.Namespace, a.SecretRef.Name, "spec.template.spec.auth.secretRef")
		if err != nil {
			return "", err
		}
		writeDigest(h, "username", data[crawlv1alpha1.AuthUsernameKey])
		writeDigest(h, "password", data[crawlv1alpha1.AuthPasswordKey])
	}
	return hex.EncodeToString(h.Sum(nil))[:10], nil
}

func writeDigest(h interface{ Write([]byte) (int, error) }, name string, v []byte) {
	sum := sha256.Sum256(v)
	h.Write([]byte(name))
	h.Write(sum[:])
}

func secretData(secrets corelisters.SecretLister, namespace, name, field string) (map[string][]byte, error) {
	s, err := secrets.Secrets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s: Secret %q not found", field, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: reading Secret %q: %w", field, name, err)
	}
	return s.Data, nil
}

// referencedSecrets names the Secrets a template's spec reads.
func referencedSecrets(spec *crawlv1alpha1.ProxySpec) []string {
	var names []string
	if ci := spec.CloudInit; ci != nil && ci.SecretRef != nil {
		names = append(names, ci.SecretRef.Name)
	}
	if a := spec.Auth; a != nil && (len(names) == 0 || names[0] != a.SecretRef.Name) {
		names = append(names, a.SecretRef.Name)
	}
	return names
}
