package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// ungrantedPod is a bound pod that held slices without the agent's grant
// when the run settled.
type ungrantedPod struct {
	pod *corev1.Pod
}

// diagnoseUngranted names every bound pod still without a grant when the
// run settled, with what its status, the kubelet's PodResources List and
// the watchdog say of it; checkStores adds the agent's records of it. Each
// is a violation: after a minute of quiet a bound pod without a grant is
// a grant lost (its containers run on slices nobody reported) or an
// admission that never ended.
func (e *env) diagnoseUngranted(ctx context.Context) int {
	pods := e.obs.ungrantedPods()
	if len(pods) == 0 {
		return 0
	}
	type kubeletView struct {
		held map[string]string // namespace/name → devices
		err  error
	}
	views := map[string]kubeletView{}
	for _, p := range pods {
		e.ungranted = append(e.ungranted, ungrantedPod{pod: p})
		v, ok := views[p.Spec.NodeName]
		if node := e.c.Node(p.Spec.NodeName); !ok && node != nil {
			v.held, v.err = kubeletHolds(ctx, node)
			views[p.Spec.NodeName] = v
		}
		kubelet := "not listed (not admitted yet, or rejected)"
		if devs, ok := v.held[p.Namespace+"/"+p.Name]; ok {
			kubelet = "listed, holding " + devs
		} else if v.err != nil {
			kubelet = "List failed: " + v.err.Error()
		}
		watchdog := "every component answered"
		if f := e.watch.failures(p.Spec.NodeName); len(f) > 0 {
			watchdog = strings.Join(f, "; ")
		}
		fmt.Printf("  VIOLATION Ungranted pod %s/%s (uid %s) on %s: %s; kubelet: %s; watchdog: %s\n",
			p.Namespace, p.Name, p.UID, p.Spec.NodeName, podState(p), kubelet, watchdog)
	}
	fmt.Printf("ungranted: %d bound pods never got a grant\n", len(pods))
	return len(pods)
}

// podState is a pod's phase, its containers' states and its age.
func podState(p *corev1.Pod) string {
	var cs []string
	for _, c := range p.Status.ContainerStatuses {
		state := "waiting"
		switch {
		case c.State.Running != nil:
			state = "running"
		case c.State.Terminated != nil:
			state = "terminated"
		case c.State.Waiting != nil && c.State.Waiting.Reason != "":
			state = c.State.Waiting.Reason
		}
		cs = append(cs, c.Name+" "+state)
	}
	s := fmt.Sprintf("phase %q, created %s", p.Status.Phase, p.CreationTimestamp.Format("15:04:05"))
	if p.Status.Reason != "" {
		s += ", reason " + p.Status.Reason
	}
	if len(cs) > 0 {
		s += ", containers " + strings.Join(cs, ", ")
	}
	return s
}

// kubeletHolds lists the node's kubelet PodResources (its own socket, not
// a proxy), repeating its rate limit's refusals for up to a second: the
// devices each listed pod's containers hold, by namespace/name.
func kubeletHolds(ctx context.Context, n *harness.ClusterNode) (map[string]string, error) {
	conn, err := grpc.NewClient("unix://"+podResourcesSocket(n.RootDir), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var resp *podresourcesapi.ListPodResourcesResponse
	for i := 0; i < 10; i++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err = podresourcesapi.NewPodResourcesListerClient(conn).List(cctx, &podresourcesapi.ListPodResourcesRequest{})
		cancel()
		if status.Code(err) != codes.ResourceExhausted || !sleepCtx(ctx, 100*time.Millisecond) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range resp.GetPodResources() {
		var held []string
		for _, c := range p.GetContainers() {
			count := map[string]int{}
			for _, d := range c.GetDevices() {
				count[d.GetResourceName()] += len(d.GetDeviceIds())
			}
			for r, n := range count {
				held = append(held, fmt.Sprintf("%s: %s ×%d", c.GetName(), r, n))
			}
		}
		sort.Strings(held)
		if len(held) == 0 {
			held = []string{"no devices"}
		}
		out[p.GetNamespace()+"/"+p.GetName()] = strings.Join(held, ", ")
	}
	return out, nil
}

// printUngrantedRecords prints what a node's store holds for the pods
// diagnoseUngranted named.
func (e *env) printUngrantedRecords(node string, grants []store.Grant) {
	for _, u := range e.ungranted {
		if u.pod.Spec.NodeName != node {
			continue
		}
		var recs []string
		for _, g := range grants {
			if g.PodUID == string(u.pod.UID) {
				var cards []string
				for _, s := range g.Slices {
					cards = append(cards, fmt.Sprintf("card%d", s.Index))
				}
				recs = append(recs, fmt.Sprintf("%s/%s on %s", g.Container, g.Resource, strings.Join(cards, "+")))
			}
		}
		if len(recs) == 0 {
			recs = []string{"no record"}
		}
		fmt.Printf("  ungranted pod %s/%s: the agent store of %s holds %s\n", u.pod.Namespace, u.pod.Name, node, strings.Join(recs, ", "))
	}
}
