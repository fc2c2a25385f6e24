package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

const ns = "chaos"

// env is one run's cluster and what the run has seen.
type env struct {
	o      options
	name   string
	c      *harness.Cluster
	cs     kubernetes.Interface
	rng    *rand.Rand
	health string // the agents' --fake-health-file

	mu        sync.Mutex
	bound     map[types.UID]bool   // pods seen bound
	lastBound int                  // the highest p-<index> seen bound
	refused   map[types.UID]string // pods the kubelet failed at admission: message
	created   int
	deleted   int
	extra     []*harness.Scheduler // replicas beside c.Scheduler
	savedInv  string               // an inventory to restore
	// schedulers, when set, are the scheduler names new pods take in turn.
	schedulers []string
	// obs watches every instant of the run (observe.go).
	obs *observer
	// watch watches every component's process and heartbeat (watchdog.go).
	watch *watchdog
	// scheds is every scheduler process the run started, c.Scheduler
	// (set through setScheduler) and the extra replicas among them.
	scheds []*harness.Scheduler
	// twins, when set, makes every other pod a copy of the one before it
	// (pods.go); ungranted is what finish found of pods never granted.
	twins     bool
	prev      *corev1.Pod
	ungranted []ungrantedPod
	// dra: a fraction of the random pods ask through ResourceClaims
	// (claims.go); claimed are their UIDs, claimNames their names (each
	// pod's claim is named after it).
	dra bool
	// dropped counts the claims the probe deleted: the cases of the
	// claims check after it.
	dropped    int
	claimed    map[types.UID]bool
	claimNames map[string]bool
	// kubelet holds the kubelet-api-faults run's proxies (kubeletapi.go).
	kubelet *kubeletFaults
	// cleanups run when the env stops, after the cluster.
	cleanups []func()
	stopInf  context.CancelFunc
}

// startEnv brings up DefaultNodes with RBAC, a profile with short leases,
// fast agent reconcile and health polling, short node Leases, and the
// annotation policy; r.prepare may change the cluster's options first.
func startEnv(ctx context.Context, o options, seed int64, r chaosRun) (*env, error) {
	name := r.name
	if o.keep != "" {
		if err := os.MkdirAll(o.keep, 0o755); err != nil {
			return nil, err
		}
	}
	// A short name: unix socket paths under it (the kubelets' PodResources
	// sockets) must stay under 108 bytes.
	dir, err := os.MkdirTemp(o.keep, "chaos-"+name+"-")
	if err != nil {
		return nil, err
	}
	if err := socketPathsFit(dir, chaosNodes); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	profile, err := shortLeaseProfile(dir)
	if err != nil {
		return nil, err
	}
	e := &env{o: o, name: name, rng: rand.New(rand.NewSource(seed)), health: filepath.Join(dir, "unhealthy"), bound: map[types.UID]bool{},
		refused: map[types.UID]string{}, dra: true, claimed: map[types.UID]bool{}, claimNames: map[string]bool{}}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	nodes, err := harness.ParseNodes(chaosNodes)
	if err != nil {
		return nil, err
	}
	copts := harness.ClusterOptions{
		RBAC: true, Profile: profile, Dir: dir, Nodes: nodes,
		AgentArgs: []string{"--reconcile-interval=1s", "--health-interval=300ms", "--fake-health-file=" + e.health},
		NodeArgs:  []string{fmt.Sprintf("--node-lease-duration-seconds=%d", leaseSeconds)},
	}
	prepareDRA(&copts)
	if r.prepare != nil {
		err = r.prepare(e, &copts)
	}
	if err == nil {
		e.c, err = harness.StartCluster(sctx, copts)
	}
	if err != nil {
		for _, f := range e.cleanups {
			f()
		}
		if o.keep == "" {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	e.cs = e.c.Client
	e.scheds = []*harness.Scheduler{e.c.Scheduler}
	if err := e.setup(sctx); err != nil {
		e.stop()
		return nil, err
	}
	e.startWatchdog(context.WithoutCancel(ctx))
	return e, nil
}

func (e *env) setup(ctx context.Context) error {
	for _, m := range []string{"manifests/admission/protect-annotations.yaml", "manifests/dra"} {
		objs, err := harness.ReadManifests(m)
		if err != nil {
			return err
		}
		if err := harness.Apply(ctx, e.c.Config, objs, false); err != nil {
			return fmt.Errorf("applying %s: %w", m, err)
		}
	}
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.stopInf = cancel
	specs := make([]harness.NodeSpec, len(e.c.Nodes))
	for i, n := range e.c.Nodes {
		specs[i] = n.Spec
	}
	var err error
	if e.obs, err = newObserver(specs); err != nil {
		return err
	}
	if err := e.obs.start(ictx, e.c.Client); err != nil {
		return err
	}
	f := informers.NewSharedInformerFactoryWithOptions(e.cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    e.seePod,
		UpdateFunc: func(_, obj any) { e.seePod(obj) },
	})
	f.Start(ictx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("pod informer did not sync")
	}
	return nil
}

func (e *env) seePod(obj any) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		e.mu.Lock()
		e.bound[p.UID] = true
		var i int
		if _, err := fmt.Sscanf(p.Name, "p-%d", &i); err == nil {
			e.lastBound = max(e.lastBound, i)
		}
		if p.Status.Reason == "UnexpectedAdmissionError" {
			e.refused[p.UID] = p.Status.Message
		}
		e.mu.Unlock()
	}
}

// socketPathsFit fails when a node's PodResources socket (or, on a DRA
// node, the DRA plugin's sockets) under dir would be longer than a unix
// socket path may be: the kubelet still listens, but no client can
// connect, and every agent call fails.
func socketPathsFit(dir, nodes string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	specs, err := harness.ParseNodes(nodes)
	if err != nil {
		return err
	}
	for _, s := range specs {
		root := filepath.Join(abs, "nodes", s.Name)
		paths := []string{podResourcesSocket(root)}
		if s.DRA {
			paths = append(paths, filepath.Join(root, "kubelet", "plugins", protocol.DRADriver, "dra.sock"),
				filepath.Join(root, "kubelet", "plugins_registry", protocol.DRADriver+"-reg.sock"))
		}
		for _, p := range paths {
			if len(p) > maxSocketPath {
				return fmt.Errorf("%s is %d bytes, more than a unix socket path may be (%d): keep the runs in a shorter directory (-keep)", p, len(p), maxSocketPath)
			}
		}
	}
	return nil
}

// chaosNodes are every run's nodes: harness.DefaultNodes and two DRA
// nodes (harness NodeSpec.DRA), a plain one and a mixed one, whose agents
// serve the claimed pods' claims as DRA kubelet plugins and whose hollow
// kubelets prepare them (claims.go).
const chaosNodes = harness.DefaultNodes + ",dra-0:2xT4:dra,dra-mixed-0:2xV100:mixed:dra"

// maxSocketPath is the longest unix socket path Go can dial on Linux
// (sun_path is 108 bytes with the terminating NUL).
const maxSocketPath = 107

// shortLeases are the leader leases of every run but apiserver-faults.
const shortLeases = "  leaseDuration: 4s\n  renewDeadline: 3s\n  retryPeriod: 500ms\n"

// shortLeaseProfile writes the default profile with 4 s leases, so that a
// killed leader is replaced in seconds rather than the default 15.
func shortLeaseProfile(dir string) (string, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "config/qgpu-scheduler.yaml"))
	if err != nil {
		return "", err
	}
	s := strings.Replace(string(b), "  leaderElect: true\n", "  leaderElect: true\n"+shortLeases, 1)
	if s == string(b) {
		return "", fmt.Errorf("config/qgpu-scheduler.yaml: no leaderElect line to extend")
	}
	p := filepath.Join(dir, "profile.yaml")
	return p, os.WriteFile(p, []byte(s), 0o644)
}

// startScheduler starts a scheduler process with the cluster's config and
// the scheduler's ServiceAccount, appending to the log file named.
func (e *env) startScheduler(ctx context.Context, log string) (*harness.Scheduler, error) {
	return harness.StartScheduler(ctx, harness.SchedulerOptions{
		Kubeconfig: filepath.Join(e.c.Dir, "scheduler.kubeconfig"),
		Profile:    filepath.Join(e.c.Dir, "scheduler-config.yaml"),
		LogPath:    filepath.Join(e.c.Dir, log),
	})
}

// startReplica starts a second scheduler, stopped with the env.
func (e *env) startReplica(ctx context.Context, log string) (*harness.Scheduler, error) {
	s, err := e.startScheduler(ctx, log)
	if err == nil {
		e.extra = append(e.extra, s)
		e.mu.Lock()
		e.scheds = append(e.scheds, s)
		e.mu.Unlock()
	}
	return s, err
}

// lastBoundIndex is the index of the newest churn pod seen bound.
func (e *env) lastBoundIndex() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastBound
}

// setScheduler makes s the cluster's scheduler (nil: none now).
func (e *env) setScheduler(s *harness.Scheduler) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.c.Scheduler = s
	if s != nil {
		e.scheds = append(e.scheds, s)
	}
}

// endScheduler kills (SIGKILL, as a crash) or stops (SIGTERM) a scheduler
// on purpose: the watchdog expects its exit.
func (e *env) endScheduler(s *harness.Scheduler, kill bool) {
	if s == nil {
		return
	}
	e.watch.expect(component{"scheduler", filepath.Base(s.LogPath)}, 1, 0)
	if kill {
		s.Kill()
	} else {
		s.Stop()
	}
}

// schedulersEver is every scheduler process the run started.
func (e *env) schedulersEver() []*harness.Scheduler {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.scheds)
}

func (e *env) stop() {
	if e.stopInf != nil {
		e.stopInf()
	}
	for _, s := range e.extra {
		s.Stop()
	}
	if err := e.c.Stop(); err != nil {
		fmt.Printf("stopping cluster: %v\n", err)
	}
	for _, f := range e.cleanups {
		f()
	}
	if e.o.keep == "" {
		_ = os.RemoveAll(e.c.Dir)
	} else {
		fmt.Printf("logs kept in %s\n", e.c.Dir)
	}
}

func (e *env) logf(format string, args ...any) {
	fmt.Printf("  %s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}
