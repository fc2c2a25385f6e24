package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// kubeletFaults are the kubelet-api-faults run's proxies, one of each per
// node, and what they did.
type kubeletFaults struct {
	lists  []*listFaults
	allocs []*allocFaults
	// listed and allocated count the proxies' calls over every node.
	listed, allocated tally
	sockets           []string // the kubelets' own PodResources sockets
}

// The kubelet-api-faults run's rates and bounds.
const (
	listFaultRate  = 0.15 // PodResources calls refused outside storms
	listFaultMax   = 3000 // per node
	allocCutRate   = 0.08 // Allocate calls cut
	allocCutDelay  = 40 * time.Millisecond
	allocCutMax    = 40  // per node
	hammerQPS      = 300 // three times the kubelet's limit
	hammerBursts   = 12
	kubeletPauses  = 12
	proxyDirectory = "c" // under a node's root dir: short, unix socket paths are limited to 108 bytes
)

// prepareKubeletAPIFaults starts, before the nodes, a PodResources proxy
// and a device-plugin proxy per node, and points the node's agent at them
// (--pod-resources-socket, --device-plugin-dir). They pass every call on
// until the run turns their faults on.
func prepareKubeletAPIFaults(e *env, c *harness.ClusterOptions) error {
	specs, err := harness.ParseNodes(harness.DefaultNodes)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return err
	}
	k := &kubeletFaults{}
	for i, spec := range specs {
		root := filepath.Join(dir, "nodes", spec.Name)
		lists := newListFaults(e.o.seed+int64(100+i), listFaultRate, listFaultMax)
		allocs := newAllocFaults(e.o.seed+int64(200+i), allocCutRate, allocCutDelay, allocCutMax)
		kubelet := podResourcesSocket(root)
		pr, err := startPodResourcesProxy(filepath.Join(root, proxyDirectory, "pr.sock"), kubelet, lists, &k.listed)
		if err != nil {
			return fmt.Errorf("PodResources proxy of %s: %w", spec.Name, err)
		}
		e.cleanups = append(e.cleanups, pr.Close)
		pp, err := startPluginProxy(spec.Name, filepath.Join(root, proxyDirectory, "dp"), allocs, &k.allocated)
		if err != nil {
			return err
		}
		e.cleanups = append(e.cleanups, pp.close)
		k.lists, k.allocs, k.sockets = append(k.lists, lists), append(k.allocs, allocs), append(k.sockets, kubelet)
	}
	e.kubelet = k
	c.AgentArgsFor = func(spec harness.NodeSpec, root string) []string {
		if spec.DRA {
			return nil // a DRA plugin: no device plugins, no PodResources reconciler
		}
		return []string{
			"--pod-resources-socket=" + filepath.Join(root, proxyDirectory, "pr.sock"),
			"--device-plugin-dir=" + filepath.Join(root, proxyDirectory, "dp"),
		}
	}
	return nil
}

// runKubeletAPIFaults churns pods, every other one a twin of the one
// before (identical requests, so that which of the two the kubelet admits
// first matters), while the agents' PodResources calls are refused at
// random and in storms, a side client drains the kubelets' rate limit in
// bursts, Allocate calls are cut, and kubelets are paused for up to 1.2 s
// now and then (the twins bound meanwhile reach the kubelet in one batch,
// which it sorts by creation time, of one-second resolution).
func runKubeletAPIFaults(ctx context.Context, e *env) error {
	k := e.kubelet
	n, budget := e.o.pods/4, e.o.runTime/2
	for i := range k.lists {
		k.lists[i].begin(time.Now(), budget)
		k.allocs[i].set(true)
	}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	h := &hammer{sockets: k.sockets, qps: hammerQPS, burstLen: time.Second, maxBursts: hammerBursts, rng: rand.New(rand.NewSource(e.o.seed + 300))}
	wg.Go(func() { h.run(fctx, e) })
	e.twins = true
	pauses := 0
	_, err := e.churn(ctx, n, 60, budget, func(i int) {
		if i%6 != 3 || pauses >= kubeletPauses {
			return
		}
		pauses++
		node := e.c.Nodes[e.rng.Intn(len(e.c.Nodes))]
		d := jitter(e.rng, 500*time.Millisecond, 700*time.Millisecond)
		wg.Go(func() { e.pauseKubelet(fctx, node, d) })
	})
	e.twins = false
	cancel()
	wg.Wait()
	for i := range k.lists {
		k.lists[i].end()
		k.allocs[i].set(false)
	}
	e.logf("PodResources calls through the proxies: %s", &k.listed)
	e.logf("Allocate calls through the proxies: %s", &k.allocated)
	e.logf("side client's List calls in %d bursts at %d/s: %s", h.count.get("bursts"), hammerQPS, &h.count)
	e.logf("%d kubelet pauses", pauses)
	if err != nil {
		return err
	}
	return k.tested(&h.count)
}

// tested says what the run failed to inject: a run without refusals, cuts
// or the kubelet's own rate limit tested nothing of its faults.
func (k *kubeletFaults) tested(hammered *tally) error {
	var errs []error
	refused := 0
	for _, c := range refusals {
		refused += k.listed.get("List refused by the proxy " + c.String())
	}
	if refused == 0 {
		errs = append(errs, errors.New("no PodResources List was refused by the proxies"))
	}
	if k.allocated.get("Allocate cancelled mid-call")+k.allocated.get("Allocate answered, answer lost") == 0 {
		errs = append(errs, errors.New("no Allocate call was cut"))
	}
	if hammered.get(codes.ResourceExhausted.String()) == 0 {
		errs = append(errs, errors.New("the side client never met the kubelets' rate limit"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("the run tested less than it should: %w", errors.Join(errs...))
	}
	return nil
}

// pauseKubelet stops the node's kubelet for d (SIGSTOP, then SIGCONT).
func (e *env) pauseKubelet(ctx context.Context, n *harness.ClusterNode, d time.Duration) {
	resume, err := n.PauseKubelet()
	if err != nil {
		e.logf("pausing the kubelet of %s: %v", n.Name, err)
		return
	}
	sleepCtx(ctx, d)
	if err := resume(); err != nil {
		e.logf("resuming the kubelet of %s: %v", n.Name, err)
	}
}
