package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// certAuthority signs client certificates; the apiserver trusts it through
// --client-ca-file, and maps a certificate's CN to the user name and its O
// entries to groups.
type certAuthority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newCertAuthority(commonName string) (*certAuthority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	return &certAuthority{cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der)}, nil
}

// issueClient returns PEM certificate and key for user in groups.
func (ca *certAuthority) issueClient(user string, groups []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating client key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, fmt.Errorf("generating serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    ca.cert.NotBefore,
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing client certificate for %q: %w", user, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding client key: %w", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// ConfigForUser returns a client config authenticating as user in groups
// with a certificate from the harness's client CA. Use it with RBAC to run a
// component with exactly the permissions it declares.
func (cp *ControlPlane) ConfigForUser(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := cp.clientCA.issueClient(user, groups)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:  cp.URL,
		QPS:   1000,
		Burst: 10000,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   cp.servingCA,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
	}, nil
}

// WriteKubeconfig writes an admin kubeconfig (credentials inline) to path,
// for kubectl --kubeconfig and for subprocesses such as the scheduler.
func (cp *ControlPlane) WriteKubeconfig(path string) error {
	return cp.KubeconfigForUser(path, "qgpu-harness-admin", "system:masters")
}

// KubeconfigForUser writes a kubeconfig for user in groups to path.
func (cp *ControlPlane) KubeconfigForUser(path, user string, groups ...string) error {
	certPEM, keyPEM, err := cp.clientCA.issueClient(user, groups)
	if err != nil {
		return err
	}
	return cp.writeKubeconfig(path, &clientcmdapi.AuthInfo{
		ClientCertificateData: certPEM,
		ClientKeyData:         keyPEM,
	})
}

// KubeconfigForServiceAccount writes to path a kubeconfig holding a token
// for ServiceAccount ns/name, minted with the TokenRequest API, so a
// component runs with the RBAC rules bound to that account (its manifests'
// rules, applied by the test). The namespace and the ServiceAccount are
// created when missing.
func (cp *ControlPlane) KubeconfigForServiceAccount(ctx context.Context, ns, name, path string) error {
	tok, err := cp.ServiceAccountToken(ctx, ns, name, nil)
	if err != nil {
		return err
	}
	return cp.writeKubeconfig(path, &clientcmdapi.AuthInfo{Token: tok})
}

// ServiceAccountToken mints a 24 h token for ServiceAccount ns/name,
// creating the namespace and the account when missing. With bound (a Pod
// of that account), the token is bound to the pod as the kubelet's
// projected tokens are: it dies with the pod and, for a pod with a
// spec.nodeName, carries the node's name in the user's extra
// authentication.kubernetes.io/node-name.
func (cp *ControlPlane) ServiceAccountToken(ctx context.Context, ns, name string, bound *authenticationv1.BoundObjectReference) (string, error) {
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if _, err := cp.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating serviceaccount %s/%s: %w", ns, name, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		// Long enough for any test or playground session; nothing rotates it.
		ExpirationSeconds: ptr.To[int64](24 * 3600),
		BoundObjectRef:    bound,
	}}
	tok, err := cp.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting token for serviceaccount %s/%s: %w", ns, name, err)
	}
	return tok.Status.Token, nil
}

// ConfigForToken returns a client config authenticating with a bearer token.
func (cp *ControlPlane) ConfigForToken(token string) *rest.Config {
	return &rest.Config{Host: cp.URL, QPS: 1000, Burst: 10000, BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.servingCA}}
}

func (cp *ControlPlane) writeKubeconfig(path string, auth *clientcmdapi.AuthInfo) error {
	const name = "qgpu-harness"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.servingCA}
	cfg.AuthInfos[name] = auth
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}
