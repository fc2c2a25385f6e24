package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Files of a Restartable control plane: the serving certificate and key
// of the first start, which every later start serves again, so that the
// clients' kubeconfigs (which pin the CA) stay valid.
const (
	servingCertName = "apiserver-serving.crt"
	servingKeyName  = "apiserver-serving.key"
)

// keepServingCert copies the test server's serving certificate and key
// out of its temporary directory, which the server removes at teardown.
func (cp *ControlPlane) keepServingCert() error {
	key, err := os.ReadFile(cp.servingKeyFile)
	if err != nil {
		return fmt.Errorf("reading the apiserver's serving key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cp.Dir, servingKeyName), key, 0o600); err != nil {
		return fmt.Errorf("keeping the apiserver's serving key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cp.Dir, servingCertName), cp.servingCA, 0o644); err != nil {
		return fmt.Errorf("keeping the apiserver's serving certificate: %w", err)
	}
	return nil
}

// RestartAPIServer stops the apiserver, keeps it down for down, and starts
// it again on the same etcd, storage prefix, flags, serving certificate
// and URL (ControlPlaneOptions.Restartable). Every client's connection is
// cut when it stops and new ones are refused while it is down, so watches
// break and informers must relist, as after a real apiserver restart;
// ServiceAccount tokens stay valid (the test server signs with a fixed
// key, a binary apiserver with the key in Dir). It returns once the new
// apiserver is ready, or with ctx's end.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context, down time.Duration) error {
	if cp.front == nil {
		return errors.New("restarting the apiserver: the control plane was not started Restartable")
	}
	cp.front.setBackend("")
	if cp.dialer != nil {
		cp.dialer.CloseAll()
	}
	if cp.teardown != nil {
		cp.teardown()
		cp.teardown = nil
	}
	if cp.tb != nil {
		cp.tb.runCleanups()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	flags := cp.flags
	if cp.opts.APIServerBinary == "" {
		// A binary apiserver's certificate and keys are the harness's own
		// files already (apiserverbin.go).
		flags = append(append([]string{}, cp.flags...),
			"--tls-cert-file="+filepath.Join(cp.Dir, servingCertName),
			"--tls-private-key-file="+filepath.Join(cp.Dir, servingKeyName))
	}
	if err := cp.startAPIServer(ctx, flags); err != nil {
		return fmt.Errorf("restarting the apiserver: %w", err)
	}
	return nil
}

// frontDoor forwards loopback TCP connections to the apiserver's current
// address. While there is none (the apiserver is down) it closes new
// connections at once, as a refused connection would be.
type frontDoor struct {
	ln net.Listener

	mu      sync.Mutex
	backend string
	conns   map[net.Conn]struct{}
	closed  bool
}

func newFrontDoor() (*frontDoor, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the apiserver's front door: %w", err)
	}
	f := &frontDoor{ln: ln, conns: map[net.Conn]struct{}{}}
	go f.serve()
	return f, nil
}

func (f *frontDoor) addr() string { return f.ln.Addr().String() }

// setBackend points new connections at backend (host:port); "" cuts every
// open connection and refuses new ones.
func (f *frontDoor) setBackend(backend string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backend = backend
	if backend == "" {
		f.cutLocked()
	}
}

func (f *frontDoor) cutLocked() {
	for c := range f.conns {
		_ = c.Close()
	}
	clear(f.conns)
}

func (f *frontDoor) close() {
	f.mu.Lock()
	f.closed = true
	f.cutLocked()
	f.mu.Unlock()
	_ = f.ln.Close()
}

func (f *frontDoor) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.forward(c)
	}
}

func (f *frontDoor) forward(c net.Conn) {
	f.mu.Lock()
	backend := f.backend
	f.mu.Unlock()
	if backend == "" {
		_ = c.Close()
		return
	}
	b, err := net.DialTimeout("tcp", backend, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	f.mu.Lock()
	if f.closed || f.backend != backend {
		f.mu.Unlock()
		_ = c.Close()
		_ = b.Close()
		return
	}
	f.conns[c], f.conns[b] = struct{}{}, struct{}{}
	f.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(b, c)
	go pipe(c, b)
	<-done // either side ended: end both
	_ = c.Close()
	_ = b.Close()
	<-done
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, b)
	f.mu.Unlock()
}

// hostPort is cp.URL's host:port.
func hostPort(url string) string { return strings.TrimPrefix(url, "https://") }
