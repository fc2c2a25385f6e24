package main

import (
	"context"
	"errors"
	"io"
	"log"
	"math/rand"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// lossyProxy forwards every request to the apiserver with cfg's
// credentials, and loses the response of every n-th binding that the
// apiserver accepted: the client sees an error (502) for a binding that
// was written, as when a connection drops after the write. With
// readBackLoss set, it also fails every read of that pod (GET by name)
// for a random 1-3 s after, so that a client that reads the pod back to
// learn whether its binding was written cannot tell, and after every
// other such loss it holds back its pod watches for 1-2 s (what they
// read is passed on late, in order), so that the client does not learn
// it from its informer either for a while.
type lossyProxy struct {
	url      string
	srv      *http.Server
	every    int64
	losing   atomic.Bool
	bindings atomic.Int64
	lost     atomic.Int64
	// readBackLoss turns on the failed reads and held watches; readsLost
	// and stalls count them.
	readBackLoss atomic.Bool
	readsLost    atomic.Int64
	stalls       atomic.Int64

	mu       sync.Mutex
	rng      *rand.Rand
	unread   map[string]time.Time // namespace/name → reads fail until
	podsRead map[string]bool      // pods with at least one read failed
	stallTo  time.Time            // pod watches hold what they read until
}

var (
	errLostResponse = errors.New("chaos: binding response lost after the write")
	errLostRead     = errors.New("chaos: read of a pod whose binding response was lost failed")
)

func startLossyProxy(cfg *rest.Config, every int64, seed int64) (*lossyProxy, error) {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &lossyProxy{url: "http://" + ln.Addr().String(), every: every, rng: rand.New(rand.NewSource(seed)),
		unread: map[string]time.Time{}, podsRead: map[string]bool{}}
	p.losing.Store(true)
	rp := &httputil.ReverseProxy{
		Rewrite:        func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:      transport,
		FlushInterval:  -1, // watches stream
		ModifyResponse: p.modify,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		},
		// Streams cut by an apiserver restart are expected, not news.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// modify decides, once the apiserver has answered, whether the client
// gets the answer: an error instead loses it.
func (p *lossyProxy) modify(resp *http.Response) error {
	r := resp.Request
	if !p.losing.Load() {
		return nil
	}
	pod, sub := podOf(r.URL.Path)
	switch {
	case r.Method == http.MethodPost && sub == "binding" && resp.StatusCode == http.StatusCreated && p.bindings.Add(1)%p.every == 0:
		lost := p.lost.Add(1)
		if p.readBackLoss.Load() {
			p.mu.Lock()
			p.unread[pod] = time.Now().Add(jitter(p.rng, time.Second, 2*time.Second))
			if lost%2 == 0 && time.Now().After(p.stallTo) {
				p.stallTo = time.Now().Add(jitter(p.rng, time.Second, time.Second))
				p.stalls.Add(1)
			}
			p.mu.Unlock()
		}
		return errLostResponse
	case r.Method == http.MethodGet && r.URL.Query().Get("watch") == "true" && path.Base(r.URL.Path) == "pods":
		resp.Body = &heldBody{ReadCloser: resp.Body, p: p}
	case r.Method == http.MethodGet && sub == "" && pod != "":
		p.mu.Lock()
		defer p.mu.Unlock()
		if time.Now().Before(p.unread[pod]) {
			p.readsLost.Add(1)
			p.podsRead[pod] = true
			return errLostRead
		}
	}
	return nil
}

// heldBody passes on what a watch reads only once the proxy's stall is
// over: the events arrive late, in order, as over a congested link.
type heldBody struct {
	io.ReadCloser
	p *lossyProxy
}

func (b *heldBody) Read(q []byte) (int, error) {
	n, err := b.ReadCloser.Read(q)
	for {
		b.p.mu.Lock()
		wait := time.Until(b.p.stallTo)
		b.p.mu.Unlock()
		if wait <= 0 {
			return n, err
		}
		time.Sleep(min(wait, 100*time.Millisecond))
	}
}

// podOf returns the namespace/name of a pod's URL path and its
// subresource: /api/v1/namespaces/<ns>/pods/<name>[/<sub>]; "" if the
// path names no single pod.
func podOf(p string) (pod, sub string) {
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	if len(parts) < 6 || parts[0] != "api" || parts[2] != "namespaces" || parts[4] != "pods" || len(parts) > 7 {
		return "", ""
	}
	if len(parts) == 7 {
		sub = parts[6]
	}
	return parts[3] + "/" + parts[5], sub
}

// readBackPods is how many pods had a read failed after a lost binding.
func (p *lossyProxy) readBackPods() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.podsRead)
}

func (p *lossyProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
}
