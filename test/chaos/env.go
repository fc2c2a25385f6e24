package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

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

	mu       sync.Mutex
	bound    map[types.UID]bool   // pods seen bound
	refused  map[types.UID]string // pods the kubelet failed at admission: message
	created  int
	deleted  int
	extra    []*harness.Scheduler // replicas beside c.Scheduler
	savedInv string               // an inventory to restore
	// schedulers, when set, are the scheduler names new pods take in turn.
	schedulers []string
	// obs watches every instant of the run (observe.go).
	obs *observer
	// cleanups run when the env stops, after the cluster.
	cleanups []func()
	stopInf  context.CancelFunc
}

// startEnv brings up DefaultNodes with RBAC, a profile with short leases,
// fast agent reconcile and health polling, and the annotation policy.
func startEnv(ctx context.Context, o options, seed int64, name string) (*env, error) {
	if o.keep != "" {
		if err := os.MkdirAll(o.keep, 0o755); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp(o.keep, "qgpu-chaos-"+name+"-")
	if err != nil {
		return nil, err
	}
	profile, err := shortLeaseProfile(dir)
	if err != nil {
		return nil, err
	}
	e := &env{o: o, name: name, rng: rand.New(rand.NewSource(seed)), health: filepath.Join(dir, "unhealthy"), bound: map[types.UID]bool{},
		refused: map[types.UID]string{}}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	e.c, err = harness.StartCluster(sctx, harness.ClusterOptions{
		RBAC: true, Profile: profile, Dir: dir,
		AgentArgs: []string{"--reconcile-interval=1s", "--health-interval=300ms", "--fake-health-file=" + e.health},
	})
	if err != nil {
		if o.keep == "" {
			_ = os.RemoveAll(dir)
		}
		return nil, err
	}
	e.cs = e.c.Client
	if err := e.setup(sctx); err != nil {
		e.stop()
		return nil, err
	}
	return e, nil
}

func (e *env) setup(ctx context.Context) error {
	objs, err := harness.ReadManifests("manifests/admission/protect-annotations.yaml")
	if err != nil {
		return err
	}
	if err := harness.Apply(ctx, e.c.Config, objs, false); err != nil {
		return err
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
		if p.Status.Reason == "UnexpectedAdmissionError" {
			e.refused[p.UID] = p.Status.Message
		}
		e.mu.Unlock()
	}
}

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
	s := strings.Replace(string(b), "  leaderElect: true\n",
		"  leaderElect: true\n  leaseDuration: 4s\n  renewDeadline: 3s\n  retryPeriod: 500ms\n", 1)
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
	}
	return s, err
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
