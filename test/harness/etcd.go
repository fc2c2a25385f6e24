package harness

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startEtcd starts an embedded single-member etcd with its data under dir.
// It uses go.etcd.io/etcd/server/v3/embed directly rather than
// k8s.io/apiserver/pkg/storage/etcd3/testserver, because the latter needs a
// testing.TB (which only the testing package can implement) and the
// playground binary must start the same etcd. The free-port choice can race
// with another process, so a bind failure is retried on new ports.
func startEtcd(dir string, level zap.AtomicLevel) (*embed.Etcd, string, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, err := tryStartEtcd(dir, level)
		if err == nil {
			return e, e.Clients[0].Addr().String(), nil
		}
		lastErr = err
	}
	return nil, "", fmt.Errorf("starting embedded etcd: %w", lastErr)
}

func tryStartEtcd(dir string, level zap.AtomicLevel) (*embed.Etcd, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}

	cfg := embed.NewConfig()
	// Test data is thrown away with the control plane, so fsync buys nothing.
	cfg.UnsafeNoFsync = true
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdLogger(level))

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed while starting: %w", err)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcd not ready after 60s")
	}
}

// etcdLogger logs at level, which the control plane keeps at error (at info
// etcd writes several hundred lines per start) and raises before Close,
// where etcd reports its own closed listeners as errors.
func etcdLogger(level zap.AtomicLevel) *zap.Logger {
	cfg := zap.NewProductionConfig()
	cfg.Level = level
	cfg.OutputPaths = []string{"stderr"}
	cfg.ErrorOutputPaths = []string{"stderr"}
	l, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return l.Named("etcd")
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
