package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// serviceProxy stands in for kube-proxy for the one Service pods use, the
// apiserver's (KUBERNETES_SERVICE_HOST:443): for every pod network namespace
// the CNI plugin hands over, it opens that address inside the namespace and
// forwards each connection to the apiserver on the host's loopback.
type serviceProxy struct {
	service string // 10.0.0.1:443
	target  string // 127.0.0.1:<apiserver port>
	ln      *net.UnixListener

	mu        sync.Mutex
	listeners []net.Listener
}

func startServiceProxy(socket, service, target string) (*serviceProxy, error) {
	_ = os.Remove(socket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, err
	}
	p := &serviceProxy{service: service, target: target, ln: ln}
	go p.serve()
	return p, nil
}

func (p *serviceProxy) serve() {
	for {
		conn, err := p.ln.AcceptUnix()
		if err != nil {
			return
		}
		go p.handle(conn)
	}
}

// handle takes one netns descriptor (SCM_RIGHTS) and answers "ok" or the error.
func (p *serviceProxy) handle(conn *net.UnixConn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err == nil {
		var fd int
		if fd, err = netnsFD(oob[:oobn]); err == nil {
			err = p.listenIn(fd)
			unix.Close(fd)
		}
	}
	reply := "ok"
	if err != nil {
		reply = err.Error()
	}
	_, _ = conn.Write([]byte(reply))
}

func netnsFD(oob []byte) (int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("no netns descriptor received: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("no netns descriptor received: %v", err)
	}
	return fds[0], nil
}

// listenIn opens the service address in the network namespace fd: a socket
// belongs to the namespace of the thread that created it, so one locked
// thread switches there for the listen call and back.
func (p *serviceProxy) listenIn(fd int) error {
	runtime.LockOSThread()
	own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer own.Close()
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering the pod's netns: %w", err)
	}
	ln, lerr := net.Listen("tcp", p.service)
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays in the pod's namespace: let it die with the
		// goroutine instead of serving others (no UnlockOSThread).
		if ln != nil {
			ln.Close()
		}
		return fmt.Errorf("leaving the pod's netns: %w", err)
	}
	runtime.UnlockOSThread()
	if lerr != nil {
		return fmt.Errorf("listening on %s in the pod's netns: %w", p.service, lerr)
	}
	p.mu.Lock()
	p.listeners = append(p.listeners, ln)
	p.mu.Unlock()
	go p.forward(ln)
	return nil
}

func (p *serviceProxy) forward(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			up, err := (&net.Dialer{}).DialContext(ctx, "tcp", p.target)
			cancel()
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

func (p *serviceProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.listeners {
		l.Close()
	}
}
