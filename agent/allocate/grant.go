package allocate

import (
	"context"
	"encoding/json"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// BuildGrant returns what the pod really holds according to grants (memory
// slices from the memory grant, cores from the core or core-greedy grant), and
// whether every (container, resource) its assignment asks for is granted.
func BuildGrant(pod *v1.Pod, a *protocol.Assignment, node string, grants []store.Grant) (*protocol.Assignment, bool) {
	byKey := map[string]store.Grant{}
	for _, g := range grants {
		if g.PodUID == string(pod.UID) {
			byKey[g.Key()] = g
		}
	}
	out := &protocol.Assignment{Version: protocol.AssignmentVersion, PodUID: string(pod.UID), Node: node, Class: a.Class}
	for _, c := range containerOrder(pod, a) {
		ca, ok := containerGrant(pod, a.Class, c, byKey)
		if !ok {
			return nil, false
		}
		out.Containers = append(out.Containers, ca)
	}
	return out, len(out.Containers) > 0
}

func containerGrant(pod *v1.Pod, class protocol.Class, c protocol.ContainerAssignment, byKey map[string]store.Grant) (protocol.ContainerAssignment, bool) {
	mem, ok := byKey[store.Key(string(pod.UID), c.Name, protocol.ResourceMemory)]
	if !ok {
		return protocol.ContainerAssignment{}, false
	}
	out := protocol.ContainerAssignment{Name: c.Name}
	for _, s := range mem.Slices {
		s.Cores = 0
		out.Slices = append(out.Slices, s)
	}
	for _, r := range []string{protocol.ResourceCore, protocol.ResourceCoreGreedy} {
		if Amount(class, c, r) == 0 {
			continue
		}
		core, ok := byKey[store.Key(string(pod.UID), c.Name, r)]
		if !ok {
			return protocol.ContainerAssignment{}, false
		}
		setCores(out.Slices, core.Slices)
	}
	return out, true
}

// setCores copies the cores of the core grant onto the memory slices, by card;
// when the reconciler has moved only one of a container's grants (the kubelet
// swapped two identical containers for one resource) the cards differ, and the
// cores go by position: they are what the container's environment says.
func setCores(mem, core []protocol.Slice) {
	for i := range mem {
		found := false
		for _, s := range core {
			if s.UUID == mem[i].UUID {
				mem[i].Cores, found = s.Cores, true
			}
		}
		if !found && i < len(core) {
			mem[i].Cores = core[i].Cores
		}
	}
}

// PatchGrant writes grant as the pod's grant annotation. The patch carries the
// pod's UID, so it fails rather than annotate a new pod of the same name.
func PatchGrant(ctx context.Context, client kubernetes.Interface, pod *v1.Pod, grant *protocol.Assignment) error {
	value, err := grant.Encode()
	if err != nil {
		return fmt.Errorf("encoding the grant: %w", err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{protocol.AnnotationGrant: value},
	}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "qgpu-agent"})
	if err != nil {
		return fmt.Errorf("patching pod %s/%s with its grant: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// GrantOf decodes the pod's grant annotation; a missing one is (nil, nil).
func GrantOf(pod *v1.Pod) (*protocol.Assignment, error) {
	value, ok := pod.Annotations[protocol.AnnotationGrant]
	if !ok {
		return nil, nil
	}
	return protocol.DecodeAssignment([]byte(value))
}
