package main

import (
	"context"
	"errors"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// podResourcesSocket is the hollow kubelet's own PodResources socket under
// a node's root dir: the real kubelet server with its rate limiter (100
// calls a second, burst 10, shared by every client).
func podResourcesSocket(root string) string {
	return filepath.Join(root, "kubelet", "pod-resources", "kubelet.sock")
}

// startPodResourcesProxy serves the PodResources API on socket and passes
// each call on to the kubelet's socket, unless faults answer it with a
// refusal first (harness.PodResourcesProxy). The agent is pointed at it
// (--pod-resources-socket), so the refusals it sees are the proxy's and,
// while the side client (hammer) drains the kubelet's limiter, the
// kubelet's own; count tallies both by code.
func startPodResourcesProxy(socket, kubelet string, faults *listFaults, count *tally) (*harness.PodResourcesProxy, error) {
	return harness.StartPodResourcesProxy(socket, kubelet, harness.PodResourcesHooks{
		Refuse: func(method string, _ int) error {
			code := faults.decide(time.Now())
			if code == codes.OK {
				return nil
			}
			count.add(method + " refused by the proxy " + code.String())
			return status.Error(code, "chaos: the PodResources proxy refused the call ("+code.String()+")")
		},
		Answered: func(method string, err error) {
			count.add(method + " answered by the kubelet " + status.Code(err).String())
		},
	})
}

// listenUnix listens on a fresh socket at path, its directory created.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

// hammer is a side client that calls the kubelets' own PodResources List
// well above their rate limit in bursts, so that other clients (the
// agents, through their proxies) meet the kubelet's real
// ResourceExhausted. Bounded: bursts of burstLen at about qps, a pause of
// 2-4 s between them, at most maxBursts, each call with a 1 s deadline.
type hammer struct {
	sockets   []string // the kubelets' sockets
	qps       int
	burstLen  time.Duration
	maxBursts int
	rng       *rand.Rand // its own: the churn uses the env's meanwhile
	count     tally
}

func (h *hammer) run(ctx context.Context, e *env) {
	clients := make([]podresourcesapi.PodResourcesListerClient, len(h.sockets))
	for i, s := range h.sockets {
		conn, err := grpc.NewClient("unix://"+s, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			e.logf("hammer: %v", err)
			return
		}
		defer conn.Close()
		clients[i] = podresourcesapi.NewPodResourcesListerClient(conn)
	}
	tick := time.Second / time.Duration(h.qps)
	for b := 0; b < h.maxBursts && sleepCtx(ctx, jitter(h.rng, 2*time.Second, 2*time.Second)); b++ {
		c := clients[b%len(clients)]
		var wg sync.WaitGroup
		for end := time.Now().Add(h.burstLen); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(tick) {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				_, err := c.List(cctx, &podresourcesapi.ListPodResourcesRequest{})
				h.count.add(status.Code(err).String())
			})
		}
		wg.Wait()
		h.count.add("bursts")
	}
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
