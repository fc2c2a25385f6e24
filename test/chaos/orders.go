package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// spreadProfile is the second QGPU profile of the ledger-orders run.
const spreadProfile = "qgpu-scheduler-spread"

// runLedgerOrders produces the event orders that once made the scheduler's
// ledger lose a slice (docs/ledger.md): bindings the apiserver persisted
// while the scheduler was told they failed (a proxy in front of the
// apiserver loses every third binding response after the write), so
// Unreserve, the informer's confirmation and the stale assumed-pod event race;
// a node's mixed label flipping and a card's health changing while pods wait,
// so node hints are replayed with stale Nodes; and two profiles that both
// enable QGPU (binpack and spread), their pods interleaved, in one scheduler.
func runLedgerOrders(ctx context.Context, e *env) error {
	// The proxy speaks to the apiserver as the scheduler does (its
	// ServiceAccount's token): the scheduler reaches it on loopback with none.
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(e.c.Dir, "scheduler.kubeconfig"))
	if err != nil {
		return err
	}
	proxy, err := startLossyProxy(cfg, 3, e.o.seed)
	if err != nil {
		return err
	}
	// The scheduler keeps using it for the checks after the run.
	e.cleanups = append(e.cleanups, proxy.close)
	if err := e.restartScheduler(ctx, proxy.url); err != nil {
		return err
	}
	e.schedulers = []string{protocol.SchedulerName, spreadProfile}
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	flips := 0
	wg.Go(func() { flips = e.flipNode(fctx, "v100-mixed-0") })
	_, err = e.churn(ctx, e.o.pods/4, 60, e.o.runTime/2, nil)
	cancel()
	wg.Wait()
	proxy.losing.Store(false)
	e.logf("%d binding responses lost after the write, %d node label/health flips; two QGPU profiles", proxy.lost.Load(), flips)
	if err != nil {
		return err
	}
	if proxy.lost.Load() == 0 {
		return errors.New("no binding response was lost: the run tested nothing")
	}
	// The flips end with the node as it started: mixed, every card healthy.
	return e.waitHealthy(ctx, "v100-mixed-0", 0)
}

// restartScheduler replaces the cluster's scheduler by one with two QGPU
// profiles that reaches the apiserver through server.
func (e *env) restartScheduler(ctx context.Context, server string) error {
	dir := e.c.Dir
	profile, err := os.ReadFile(filepath.Join(dir, "scheduler-config.yaml"))
	if err != nil {
		return err
	}
	two, err := harness.WithSpreadProfile(string(profile), spreadProfile)
	if err != nil {
		return err
	}
	profilePath := filepath.Join(dir, "scheduler-config-two-profiles.yaml")
	if err := os.WriteFile(profilePath, []byte(two), 0o644); err != nil {
		return err
	}
	kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "scheduler.kubeconfig"))
	if err != nil {
		return err
	}
	for _, c := range kc.Clusters {
		c.Server, c.CertificateAuthorityData = server, nil
	}
	for _, a := range kc.AuthInfos {
		a.Token = ""
	}
	kcPath := filepath.Join(dir, "scheduler-via-proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kcPath); err != nil {
		return err
	}
	e.endScheduler(e.c.Scheduler, false)
	s, err := harness.StartScheduler(ctx, harness.SchedulerOptions{Kubeconfig: kcPath, Profile: profilePath,
		LogPath: filepath.Join(dir, "scheduler-two-profiles.log")})
	e.setScheduler(s)
	return err
}

// flipNode takes the node's mixed label away and back and turns its card 0
// unhealthy and healthy again, every 200-500 ms, ending as it started.
func (e *env) flipNode(ctx context.Context, node string) int {
	uuid, err := e.cardUUID(ctx, node, 0)
	if err != nil {
		e.logf("flips: %v", err)
		return 0
	}
	n := 0
	mixed := true
	for ; ctx.Err() == nil && n < 500; n++ {
		mixed = !mixed
		value := `"` + protocol.LabelValueEnable + `"`
		health := ""
		if !mixed {
			value, health = "null", uuid+"\n"
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, protocol.LabelMixedEnable, value)
		if _, err := e.cs.CoreV1().Nodes().Patch(context.WithoutCancel(ctx), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			e.logf("flip: %v", err)
		}
		_ = os.WriteFile(e.health, []byte(health), 0o644)
		time.Sleep(time.Duration(200+e.rng.Intn(300)) * time.Millisecond)
	}
	if !mixed {
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, protocol.LabelMixedEnable, protocol.LabelValueEnable)
		_, _ = e.cs.CoreV1().Nodes().Patch(context.WithoutCancel(ctx), node, types.MergePatchType, patch, metav1.PatchOptions{})
		_ = os.WriteFile(e.health, nil, 0o644)
	}
	return n
}
