// Package harness starts the real components of
// docs/design.md#what-the-tests-run-for-real for tests and for
// the playground: an embedded etcd, an in-process kube-apiserver, and hollow
// nodes (bin/qgpu-hollow-node) run as subprocesses.
package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// ControlPlaneOptions configures StartControlPlane. The zero value is a
// permissive (AlwaysAllow) control plane with quiet logs.
type ControlPlaneOptions struct {
	// RBAC turns on --authorization-mode=Node,RBAC, so that components can be
	// run with least-privilege credentials (see KubeconfigForServiceAccount).
	RBAC bool
	// ExtraFlags are appended to the kube-apiserver flags.
	ExtraFlags []string
	// Dir holds etcd data and certificates. Empty: a new temporary directory,
	// removed by Stop.
	Dir string
	// Logf receives the test server's progress messages; nil discards them.
	Logf func(format string, args ...any)
	// ServiceAccounts keeps the ServiceAccount admission plugin on, so that
	// pods get their projected token volume, as in a real cluster (the e2e
	// node runs kube-controller-manager to publish kube-root-ca.crt).
	ServiceAccounts bool
	// Verbosity is the global klog -v. It is set on every start because the
	// ktesting package, linked in with the test server, raises it to 5 at
	// init, which makes the apiserver log thousands of lines per test.
	Verbosity int
	// Restartable serves the apiserver through a loopback forwarder on a
	// port of its own, so that RestartAPIServer can start it again (the
	// test server always listens on a new free port) behind the same URL
	// and serving certificate. For test/chaos.
	Restartable bool
	// APIServerBinary runs this kube-apiserver binary as a subprocess
	// instead of the in-process test server, with the same etcd, flags and
	// admission setup, and certificates and a ServiceAccount key of the
	// harness's own (apiserverbin.go). Empty: $QGPU_KUBE_APISERVER_BIN, and
	// if that is empty too, the in-process server of the k8s.io/kubernetes
	// release in go.mod. make integration-skew sets the variable
	// (docs/install.md#supported-versions).
	APIServerBinary string
}

// ControlPlane is a running etcd plus kube-apiserver.
type ControlPlane struct {
	// Config is an admin (system:masters) client-certificate config. Every
	// copy of it shares one dialer that Stop cuts first, so that open watches
	// cannot hold the apiserver's shutdown for 60 s.
	Config *rest.Config
	Client kubernetes.Interface
	// URL is the apiserver's https URL on 127.0.0.1.
	URL string
	// Dir holds etcd data and certificates.
	Dir string

	servingCA []byte
	clientCA  *certAuthority
	dialer    *connrotation.Dialer
	tb        *programTB
	teardown  func()
	etcd      *embed.Etcd
	etcdLevel zap.AtomicLevel
	removeDir bool

	// What a restart needs again (restart.go); front is nil unless Restartable.
	opts    ControlPlaneOptions
	flags   []string
	storage *storagebackend.Config
	front   *frontDoor
	// servingKeyFile is the test server's key, in its own directory until
	// keepServingCert copies it.
	servingKeyFile string
}

// StartControlPlane starts etcd and kube-apiserver. ctx bounds the start
// only: the control plane runs until Stop.
func StartControlPlane(ctx context.Context, opts ControlPlaneOptions) (_ *ControlPlane, err error) {
	setKlogVerbosity(opts.Verbosity)
	if opts.APIServerBinary == "" {
		opts.APIServerBinary = os.Getenv(APIServerBinEnv)
	}
	cp := &ControlPlane{Dir: opts.Dir, opts: opts}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "qgpu-controlplane-"); err != nil {
			return nil, fmt.Errorf("creating control plane dir: %w", err)
		}
		cp.removeDir = true
	}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	var etcdAddr string
	cp.etcdLevel = zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	if cp.etcd, etcdAddr, err = startEtcd(cp.Dir, cp.etcdLevel); err != nil {
		return nil, err
	}
	if cp.clientCA, err = newCertAuthority("qgpu-harness-client-ca"); err != nil {
		return nil, err
	}
	caFile := path.Join(cp.Dir, "client-ca.crt")
	if err := os.WriteFile(caFile, cp.clientCA.certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("writing client CA: %w", err)
	}
	cp.storage = storagebackend.NewDefaultConfig(path.Join(uuid.New().String(), "registry"), nil)
	cp.storage.Transport.ServerList = []string{"http://" + etcdAddr}
	cp.flags = apiserverFlags(opts, caFile)
	if opts.Restartable {
		if cp.front, err = newFrontDoor(); err != nil {
			return nil, err
		}
	}
	if opts.APIServerBinary != "" {
		if cp.servingCA, err = writeBinAPIServerFiles(path.Join(cp.Dir, "kube-apiserver")); err != nil {
			return nil, err
		}
	}
	if err := cp.startAPIServer(ctx, cp.flags); err != nil {
		return nil, err
	}
	if cp.front != nil && opts.APIServerBinary == "" {
		if err := cp.keepServingCert(); err != nil {
			return nil, err
		}
	}
	if err := cp.buildAdminClient(); err != nil {
		return nil, err
	}
	return cp, nil
}

func apiserverFlags(opts ControlPlaneOptions, clientCAFile string) []string {
	// ServiceAccount admission mounts a kube-root-ca.crt ConfigMap that only
	// kube-controller-manager publishes; TaintNodesByCondition would taint
	// every new Node not-ready, and no node lifecycle controller runs to lift it.
	disable := "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"
	if opts.ServiceAccounts {
		disable = "--disable-admission-plugins=TaintNodesByCondition"
	}
	flags := []string{
		disable,
		// Overrides the test server's own client CA, whose key it discards,
		// so that the harness can mint client certificates for any user.
		"--client-ca-file=" + clientCAFile,
	}
	if opts.RBAC {
		flags = append(flags, "--authorization-mode=Node,RBAC")
	}
	return append(flags, opts.ExtraFlags...)
}

// startAPIServer starts the binary apiserver if there is one, else the
// in-process test server.
func (cp *ControlPlane) startAPIServer(ctx context.Context, flags []string) error {
	if cp.opts.APIServerBinary != "" {
		return cp.startBinAPIServer(ctx, flags)
	}
	return cp.startTestServer(ctx, flags)
}

// startTestServer runs the test server in a goroutine of its own because its
// Fatalf (through programTB) ends the calling goroutine.
func (cp *ControlPlane) startTestServer(ctx context.Context, flags []string) error {
	storage := cp.storage
	cp.tb = newProgramTB("qgpu-harness", cp.Dir, cp.opts.Logf)
	// A TContext of our own makes the test server skip ktesting.Init (which
	// would route all apiserver logs through tb) and lets ctx abort the start.
	tCtx := ktesting.WithCancel(ktesting.InitCtx(context.WithoutCancel(ctx), cp.tb))
	stopOnCtx := context.AfterFunc(ctx, func() { tCtx.Cancel("start aborted: " + context.Cause(ctx).Error()) })
	defer stopOnCtx()

	type result struct {
		server apiservertesting.TestServer
		err    error
	}
	done := make(chan result, 1)
	go func() {
		res := result{err: errors.New("test server called Fatal")}
		defer func() { done <- res }()
		res.server, res.err = apiservertesting.StartTestServer(tCtx, nil, flags, storage)
	}()
	res := <-done
	if res.err != nil {
		if msg := cp.tb.firstError(); msg != "" {
			res.err = fmt.Errorf("%w: %s", res.err, msg)
		}
		tCtx.Cancel("start failed")
		return fmt.Errorf("starting kube-apiserver: %w", res.err)
	}
	cp.teardown = res.server.TearDownFn
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(res.server.ServerOpts.SecureServing.BindPort)
	certKey := res.server.ServerOpts.SecureServing.ServerCert.CertKey
	cp.servingKeyFile = certKey.KeyFile
	if cp.front != nil {
		cp.front.setBackend(hostPort(cp.URL))
		cp.URL = "https://" + cp.front.addr()
	}
	certFile := certKey.CertFile
	// The serving certificate file holds the chain up to its self-signed CA;
	// keep it in memory because the test server deletes its directory.
	var err error
	if cp.servingCA, err = os.ReadFile(certFile); err != nil {
		return fmt.Errorf("reading apiserver serving certificate: %w", err)
	}
	return nil
}

func (cp *ControlPlane) buildAdminClient() error {
	cfg, err := cp.ConfigForUser("qgpu-harness-admin", "system:masters")
	if err != nil {
		return err
	}
	cp.dialer = connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Dial = cp.dialer.DialContext
	cp.Config = cfg
	if cp.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		return fmt.Errorf("creating admin clientset: %w", err)
	}
	return nil
}

// Stop tears down the apiserver and etcd, and removes Dir if it created it.
// It is safe to call more than once.
func (cp *ControlPlane) Stop() {
	if cp.dialer != nil {
		cp.dialer.CloseAll()
	}
	if cp.front != nil {
		cp.front.close()
	}
	if cp.teardown != nil {
		cp.teardown()
		cp.teardown = nil
	}
	if cp.tb != nil {
		cp.tb.runCleanups()
	}
	if cp.etcd != nil {
		cp.etcdLevel.SetLevel(zapcore.FatalLevel)
		cp.etcd.Close()
		cp.etcd = nil
	}
	if cp.removeDir && cp.Dir != "" {
		_ = os.RemoveAll(cp.Dir)
		cp.removeDir = false
	}
}

// setKlogVerbosity sets klog's global -v, which ktesting registers on
// flag.CommandLine.
func setKlogVerbosity(v int) {
	if f := flag.CommandLine.Lookup("v"); f != nil {
		_ = f.Value.Set(strconv.Itoa(v))
	}
}
