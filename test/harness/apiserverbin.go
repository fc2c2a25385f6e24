package harness

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// APIServerBinEnv names a kube-apiserver binary that StartControlPlane runs
// instead of the in-process test server when ControlPlaneOptions.APIServerBinary
// is empty: make integration-skew sets it to the pinned newer minor
// (hack/tools/kube-apiserver, docs/install.md#supported-versions).
const APIServerBinEnv = "QGPU_KUBE_APISERVER_BIN"

// binAPIServer is a kube-apiserver run as a subprocess. Everything the
// in-process test server makes for itself lives in dir instead, so that a
// restart serves the same certificate and accepts the same tokens.
type binAPIServer struct {
	bin string
	dir string
	cmd *exec.Cmd
	// done closes when the process has been waited for; waitErr is then set.
	done    chan struct{}
	waitErr error
}

// The files of a binary apiserver under <Dir>/kube-apiserver.
const (
	binServingCA    = "serving-ca.crt"
	binServingCert  = "serving.crt"
	binServingKey   = "serving.key"
	binSAKey        = "service-account.key"
	binProxyCA      = "front-proxy-ca.crt"
	binProxyCert    = "front-proxy-client.crt"
	binProxyKey     = "front-proxy-client.key"
	binAPIServerLog = "kube-apiserver.log"
)

// writeBinAPIServerFiles writes what the test server would generate: a
// serving certificate for 127.0.0.1 and its CA, a ServiceAccount signing
// key, and a front-proxy CA with the apiserver's proxy client certificate
// (requestheader authentication, as the test server's EnableCertAuth sets
// up). It returns the serving CA's PEM, which clients pin.
func writeBinAPIServerFiles(dir string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	servingCA, err := newCertAuthority("qgpu-harness-serving-ca")
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := servingCA.issueServing("kube-apiserver", []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the service account key: %w", err)
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, fmt.Errorf("encoding the service account key: %w", err)
	}
	proxyCA, err := newCertAuthority("qgpu-harness-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	proxyCert, proxyKey, err := proxyCA.issueClient("front-proxy-client", nil)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		binServingCA: servingCA.certPEM, binServingCert: certPEM, binServingKey: keyPEM,
		binSAKey:   pemBlock("EC PRIVATE KEY", saDER),
		binProxyCA: proxyCA.certPEM, binProxyCert: proxyCert, binProxyKey: proxyKey,
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return servingCA.certPEM, nil
}

// issueServing returns PEM certificate and key for a server at ips and dns.
func (ca *certAuthority) issueServing(cn string, ips []net.IP, dns []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    ca.cert.NotBefore,
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding serving key: %w", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

// binAPIServerFlags are the flags the test server sets in code
// (cmd/kube-apiserver/app/testing/testserver.go): storage, serving,
// ServiceAccount tokens, the service range, requestheader authentication.
// The harness's own flags (apiserverFlags) follow them, so they win.
func binAPIServerFlags(dir, etcdURL, etcdPrefix string, port int, verbosity int) []string {
	f := func(name string) string { return filepath.Join(dir, name) }
	return []string{
		"--etcd-servers=" + etcdURL,
		"--etcd-prefix=" + etcdPrefix,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// 1.37 refuses a loopback advertise address for the default
		// (lease) endpoint reconciler ("may not be in the loopback range");
		// its own test server turns reconciliation off for a loopback
		// address (cmd/kube-apiserver/app/testing/testserver.go of
		// v1.37.2), and so does the harness, for every version: nothing
		// here reads the kubernetes Service's endpoints.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f(binServingCert),
		"--tls-private-key-file=" + f(binServingKey),
		"--service-cluster-ip-range=10.0.0.0/16",
		"--service-account-issuer=https://foo.bar.example.com",
		"--service-account-key-file=" + f(binSAKey),
		"--service-account-signing-key-file=" + f(binSAKey),
		"--requestheader-client-ca-file=" + f(binProxyCA),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f(binProxyCert),
		"--proxy-client-key-file=" + f(binProxyKey),
		"--v=" + strconv.Itoa(verbosity),
	}
}

// startBinAPIServer runs cp.opts.APIServerBinary with the harness flags on a
// free port and waits until it is ready (/readyz, the default namespace).
// The port is chosen before the process binds it, so a lost race is retried
// on a new port.
func (cp *ControlPlane) startBinAPIServer(ctx context.Context, flags []string) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = cp.tryStartBinAPIServer(ctx, flags); err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (cp *ControlPlane) tryStartBinAPIServer(ctx context.Context, flags []string) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	dir := filepath.Join(cp.Dir, "kube-apiserver")
	args := append(binAPIServerFlags(dir, cp.storage.Transport.ServerList[0], "/"+cp.storage.Prefix, ports[0], cp.opts.Verbosity), flags...)
	s, err := startBinProcess(cp.opts.APIServerBinary, dir, args)
	if err != nil {
		return err
	}
	url := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	if err := s.waitReady(ctx, cp.probeConfigClient(url)); err != nil {
		s.stop()
		return fmt.Errorf("starting %s: %w\n%s", s.bin, err, tail(filepath.Join(dir, binAPIServerLog), 20))
	}
	cp.teardown = s.stop
	cp.URL = url
	if cp.front != nil {
		cp.front.setBackend(hostPort(cp.URL))
		cp.URL = "https://" + cp.front.addr()
	}
	return nil
}

// probeConfigClient is an admin client for url, the apiserver itself even
// behind a front door.
func (cp *ControlPlane) probeConfigClient(url string) func() (kubernetes.Interface, error) {
	return func() (kubernetes.Interface, error) {
		cfg, err := cp.ConfigForUser("qgpu-harness-admin", "system:masters")
		if err != nil {
			return nil, err
		}
		cfg.Host = url
		cfg.Timeout = 5 * time.Second
		return kubernetes.NewForConfig(cfg)
	}
}

func startBinProcess(bin, dir string, args []string) (*binAPIServer, error) {
	logFile, err := os.OpenFile(filepath.Join(dir, binAPIServerLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the kube-apiserver log: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// If the test binary dies without cleanup, the apiserver goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &binAPIServer{bin: bin, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	return s, nil
}

// waitReady polls, for at most a minute, until /readyz answers ok and the
// default namespace exists (what the test server waits for), failing at
// once if the process exits.
func (s *binAPIServer) waitReady(ctx context.Context, newClient func() (kubernetes.Interface, error)) error {
	cs, err := newClient()
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-s.done:
			return false, fmt.Errorf("kube-apiserver exited: %v", s.waitErr)
		default:
		}
		var status int
		res := cs.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		if status != http.StatusOK {
			last = fmt.Errorf("/readyz: %d %v", status, res.Error())
			return false, nil
		}
		_, last = cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		if apierrors.IsNotFound(last) {
			return false, nil
		}
		return last == nil, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last probe: %v)", err, last)
	}
	return err
}

// stop sends SIGTERM and SIGKILL after 15 s. Safe to call more than once.
func (s *binAPIServer) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
