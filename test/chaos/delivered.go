package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/qgpu-scheduler/qgpu/agent/nvml/fakespec"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/internal/view"
)

// checkDelivered judges what the containers really got, not what anyone
// recorded: the hollow kubelet writes the environment the agent's Allocate
// answers gave each container it created (test/hollownode's recorder;
// NVIDIA_VISIBLE_DEVICES, QGPU_MEMORY_GIB, QGPU_CORES of the env backend;
// on a DRA node what the CDI devices of the container's prepared claims
// set). For every running qGPU pod each container's environment must name
// the cards and amounts of its grant, a claimed pod's its assignment (else the grant hides what the container
// runs on), and on every card the memory the running containers were given
// must fit (one slice, one container: a slice answered to two containers
// shows here even when every record looks right).
func (e *env) checkDelivered(ctx context.Context) int {
	pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Printf("delivered: listing pods: %v\n", err)
		return 1
	}
	capacity, err := e.cardMemory()
	if err != nil {
		fmt.Printf("delivered: %v\n", err)
		return 1
	}
	var v []view.Violation
	used := map[string]int64{}       // card UUID → GiB given to running containers
	holders := map[string][]string{} // card UUID → pod/container
	checked := 0
	phases := map[string]int{}
	for _, p := range pods.Items {
		node := e.c.Node(p.Spec.NodeName)
		if node == nil || p.DeletionTimestamp != nil {
			continue
		}
		phases[string(p.Status.Phase)]++
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		grant, _ := protocol.DecodeAssignment([]byte(p.Annotations[protocol.AnnotationGrant]))
		assigned, _ := protocol.DecodeAssignment([]byte(p.Annotations[protocol.AnnotationAssignment]))
		if len(p.Spec.ResourceClaims) > 0 {
			// A claimed pod has no grant: its node prepared the claim's
			// allocation, which the cluster check compares with the
			// assignment, and the claim's CDI devices deliver it.
			grant = assigned
		}
		for _, c := range p.Spec.Containers {
			got, err := node.ContainerEnv(p.Namespace, p.Name, c.Name)
			if problem := nothingDelivered(assigned, c.Name, got, err); problem != "" {
				v = append(v, view.Violation{Kind: "NothingDelivered", Object: p.Namespace + "/" + p.Name + " container " + c.Name, Detail: problem})
				continue
			}
			if got["NVIDIA_VISIBLE_DEVICES"] == "" {
				continue // a container the scheduler gave no slice
			}
			checked++
			d := parseDelivered(got)
			if want, ok := grantOf(grant, c.Name); !ok || !d.matches(want) {
				v = append(v, view.Violation{Kind: "DeliveredMismatch", Object: p.Namespace + "/" + p.Name + " container " + c.Name,
					Detail: fmt.Sprintf("the container was given %s, its grant says %s", d, describe(want, ok))})
			}
			for _, uuid := range d.cards {
				used[uuid] += d.memoryGiB / int64(len(d.cards))
				holders[uuid] = append(holders[uuid], p.Name+"/"+c.Name)
			}
		}
	}
	for _, uuid := range slices.Sorted(maps.Keys(used)) {
		if c, ok := capacity[uuid]; ok && used[uuid] > c {
			v = append(v, view.Violation{Kind: "OversubscribedDelivered", Object: "card " + uuid,
				Detail: fmt.Sprintf("running containers were given %d GiB of its %d GiB: %s", used[uuid], c, strings.Join(holders[uuid], ", "))})
		}
	}
	var byPhase []string
	for _, ph := range slices.Sorted(maps.Keys(phases)) {
		byPhase = append(byPhase, fmt.Sprintf("%s %d", ph, phases[ph]))
	}
	return report(fmt.Sprintf("delivered (running containers' environments; bound pods: %s)", strings.Join(byPhase, ", ")), checked, v)
}

// nothingDelivered is why a running container's record fails the check
// before its contents are compared: one the scheduler assigned slices
// whose record cannot be read, or which was given no card. "" when the
// record can be judged, or the container was assigned nothing.
func nothingDelivered(assigned *protocol.Assignment, container string, env map[string]string, err error) string {
	if _, ok := grantOf(assigned, container); !ok {
		return ""
	}
	switch {
	case err != nil:
		return "assigned a slice, but the record of what it was given cannot be read: " + err.Error()
	case env["NVIDIA_VISIBLE_DEVICES"] == "":
		return "assigned a slice, but given no card (NVIDIA_VISIBLE_DEVICES is empty)"
	}
	return ""
}

// cardMemory is every card's memory in GiB by UUID, from the node specs
// (what the fake NVML has), whatever the inventories say.
func (e *env) cardMemory() (map[string]int64, error) {
	out := map[string]int64{}
	for _, n := range e.c.Nodes {
		cards, err := fakespec.Parse(n.Spec.Cards)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		for i, c := range cards {
			out[fakespec.UUID(n.Name, i)] = protocol.Card{MemoryMiB: c.MemoryMiB}.MemoryGiB()
		}
	}
	return out, nil
}

// delivered is what one container's environment says it got.
type delivered struct {
	cards     []string // UUIDs, sorted
	memoryGiB int64
	cores     int64 // -1: no cores variable (online pods hold none)
}

func parseDelivered(env map[string]string) delivered {
	d := delivered{cards: strings.Split(env["NVIDIA_VISIBLE_DEVICES"], ","), cores: -1}
	slices.Sort(d.cards)
	d.memoryGiB, _ = strconv.ParseInt(env["QGPU_MEMORY_GIB"], 10, 64)
	if c, ok := env["QGPU_CORES"]; ok {
		d.cores, _ = strconv.ParseInt(c, 10, 64)
	}
	return d
}

func (d delivered) String() string {
	s := fmt.Sprintf("%s %d GiB", strings.Join(d.cards, ","), d.memoryGiB)
	if d.cores >= 0 {
		s += fmt.Sprintf(" %d cores", d.cores)
	}
	return s
}

// matches reports whether the environment names the grant's cards and
// amounts (cores only where the environment has them).
func (d delivered) matches(want protocol.ContainerAssignment) bool {
	var cards []string
	for _, s := range want.Slices {
		cards = append(cards, s.UUID)
	}
	slices.Sort(cards)
	mem, cores := want.Total()
	return slices.Equal(d.cards, cards) && d.memoryGiB == mem && (d.cores < 0 || d.cores == cores)
}

func grantOf(a *protocol.Assignment, container string) (protocol.ContainerAssignment, bool) {
	if a == nil {
		return protocol.ContainerAssignment{}, false
	}
	for _, c := range a.Containers {
		if c.Name == container {
			return c, true
		}
	}
	return protocol.ContainerAssignment{}, false
}

func describe(c protocol.ContainerAssignment, ok bool) string {
	if !ok {
		return "nothing (no grant for it)"
	}
	var cards []string
	for _, s := range c.Slices {
		cards = append(cards, s.UUID)
	}
	mem, cores := c.Total()
	return fmt.Sprintf("%s %d GiB %d cores", strings.Join(cards, ","), mem, cores)
}
