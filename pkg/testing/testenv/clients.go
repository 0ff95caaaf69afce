package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes an admin kubeconfig for bin/kubectl and other clients to
// path, with the certificates inline so that it does not depend on Dir.
func (e *Environment) WriteKubeconfig(path string) error {
	return e.WriteKubeconfigVia(path, e.Config.Host)
}

// WriteKubeconfigVia writes an admin kubeconfig like WriteKubeconfig's that
// dials server instead: another loopback port forwarded to the API server
// (its certificate names 127.0.0.1, which server must keep).
func (e *Environment) WriteKubeconfigVia(path, server string) error {
	const name = "testenv"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: e.Config.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: e.Config.CertData, ClientKeyData: e.Config.KeyData}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "admin", Namespace: metav1.NamespaceDefault}
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return nil
}

// WriteUserKubeconfig writes a kubeconfig that authenticates with token
// only (no client certificate), so that a process run on it has that
// identity's RBAC and nothing more.
func (e *Environment) WriteUserKubeconfig(path, token string) error {
	const name = "testenv"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "user"}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return nil
}

// UserConfig returns a config for the same API server and CA that authenticates
// with a bearer token, e.g. one from ServiceAccountToken.
func (e *Environment) UserConfig(token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(e.Config)
	cfg.BearerToken = token
	return cfg
}

// ServiceAccountToken creates the namespace and the ServiceAccount if missing and
// mints a token for it with the TokenRequest API, for the default audience. The API
// server refuses a ttl under 10 minutes; 0 means its default of one hour.
func (e *Environment) ServiceAccountToken(ctx context.Context, namespace, name string, ttl time.Duration) (string, error) {
	client, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return "", fmt.Errorf("service account token: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("service account token: creating namespace %s: %w", namespace, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("service account token: creating %s/%s: %w", namespace, name, err)
	}
	req := &authenticationv1.TokenRequest{}
	if ttl > 0 {
		seconds := int64(ttl / time.Second)
		req.Spec.ExpirationSeconds = &seconds
	}
	resp, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("service account token for %s/%s: %w", namespace, name, err)
	}
	return resp.Status.Token, nil
}
