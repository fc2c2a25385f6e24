package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/e2enode/verify"
)

// What the DRA leg reads on its node and in the API: the node's
// ResourceSlice, a claimed pod's allocation, assignment, claim spec and
// container, the agent's checkpoint.

// claimTemplate is a ResourceClaimTemplate of one qGPU request.
func claimTemplate(name string, class protocol.Class, memory, cores string) *resourceapi.ResourceClaimTemplate {
	caps := map[resourceapi.QualifiedName]resource.Quantity{protocol.DRACapacityMemory: resource.MustParse(memory)}
	if cores != "" {
		caps[protocol.DRACapacityCores] = resource.MustParse(cores)
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: examplesNamespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: protocol.DRADeviceClass(class), Capacity: &resourceapi.CapacityRequirements{Requests: caps}}}},
		}}},
	}
}

// checkSlice waits (bounded) for the node's ResourceSlice of the driver
// and checks, as the API server stored it, one device per card, each
// shareable with both capacities' request policy.
func (c *draChecker) checkSlice() bool {
	var devices []resourceapi.Device
	err := wait.PollUntilContextTimeout(c.ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.cp.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: "spec.driver=" + protocol.DRADriver + ",spec.nodeName=" + c.n.name})
		if err != nil {
			return false, nil
		}
		devices = devices[:0]
		for _, s := range list.Items {
			if s.Spec.Pool.Name == c.n.name {
				devices = append(devices, s.Spec.Devices...)
			}
		}
		return len(devices) > 0, nil
	})
	if err != nil {
		c.fail("no ResourceSlice of %s with devices for %s: %v", protocol.DRADriver, c.n.name, err)
		return false
	}
	var problems []string
	cards := cardCount(draFakeCards)
	if len(devices) != cards {
		problems = append(problems, fmt.Sprintf("%d devices, want %d (one per card)", len(devices), cards))
	}
	for _, d := range devices {
		if _, ok := protocol.DRADeviceIndex(d.Name); !ok {
			problems = append(problems, "device "+d.Name+" is not gpu-<index>")
		}
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			problems = append(problems, d.Name+": allowMultipleAllocations is not true")
		}
		for _, name := range []resourceapi.QualifiedName{protocol.DRACapacityMemory, protocol.DRACapacityCores} {
			if cp, ok := d.Capacity[name]; !ok || cp.RequestPolicy == nil {
				problems = append(problems, fmt.Sprintf("%s: capacity %s has no requestPolicy", d.Name, name))
			}
		}
	}
	if len(problems) > 0 {
		c.fail("the ResourceSlice of %s: %s", c.n.name, strings.Join(problems, "; "))
		return false
	}
	c.ok("%s publishes %d devices, each with allowMultipleAllocations and the requestPolicy of memory and cores (read back from the API)", c.n.name, len(devices))
	return true
}

// checkClaimPod checks a running pod's claim: allocated by qgpu-scheduler
// (the node's pool, one device, the consumed memory and cores, a share ID,
// the pod in reservedFor) as its assignment says; prepared by the agent (its
// claim spec in the node's CDI directory); and its container: exactly its
// card, the variables of the claim's class and slice, every variable of
// the claim spec, and the delivery of the node's backend (c.backend) as the
// device-plugin leg checks it (deliveryProblems, draDeliveryProblems). It
// returns the card's index.
func (c *draChecker) checkClaimPod(p *corev1.Pod, class protocol.Class, memoryGiB, cores int64) (int, []string) {
	claim, err := c.claimOf(p)
	if err != nil {
		return -1, []string{err.Error()}
	}
	card, problems := allocationProblems(claim, p, c.n.name, memoryGiB, cores)
	if len(problems) > 0 {
		return card, problems
	}
	c.prepared[p.Name] = claim.UID
	edits, err := claimSpecEdits(c.n.dir, claim.UID)
	if err != nil {
		return card, []string{err.Error()}
	}
	lines, err := containerOutput(c.n.dir, p, "probe")
	if err != nil {
		return card, []string{err.Error()}
	}
	problems = append(verify.Container(p, "probe", lines, DeviceRoot), c.n.driverProblems(lines)...)
	if got := verify.Backend(lines); got != c.backend && !setsOwnEnv(p) {
		problems = append(problems, fmt.Sprintf("answered by the %s backend, the node's is %s", got, c.backend))
	}
	problems = append(problems, c.draDeliveryProblems(p, claim, lines, cores)...)
	want := map[string]string{"QGPU_CLASS": string(class), "QGPU_MEMORY_GIB": strconv.FormatInt(memoryGiB, 10)}
	if class != protocol.ClassOnline {
		want["QGPU_CORES"] = strconv.FormatInt(cores, 10)
	}
	problems = append(problems, verify.Env(lines, want)...)
	if class == protocol.ClassOnline && slices.ContainsFunc(lines, func(l verify.Line) bool { return l.Kind == "env" && l.Name == "QGPU_CORES" }) {
		problems = append(problems, "an online claim's container has QGPU_CORES")
	}
	specEnv := map[string]string{}
	for _, kv := range edits.Env {
		k, v, _ := strings.Cut(kv, "=")
		specEnv[k] = v
	}
	if len(specEnv) == 0 {
		problems = append(problems, "the claim spec sets no variable")
	}
	return card, append(problems, verify.Env(lines, specEnv)...)
}

// allocationProblems compares the claim's allocation with what the pod
// asked and its assignment annotation; it returns the allocated card.
func allocationProblems(claim *resourceapi.ResourceClaim, p *corev1.Pod, node string, memoryGiB, cores int64) (int, []string) {
	a := claim.Status.Allocation
	if a == nil || len(a.Devices.Results) != 1 {
		return -1, []string{fmt.Sprintf("claim %s: allocation %+v, want one result", claim.Name, a)}
	}
	r := a.Devices.Results[0]
	card, ok := protocol.DRADeviceIndex(r.Device)
	var problems []string
	if r.Driver != protocol.DRADriver || r.Pool != node || !ok {
		problems = append(problems, fmt.Sprintf("claim %s: device %s/%s/%s, want %s/%s/gpu-<index>", claim.Name, r.Driver, r.Pool, r.Device, protocol.DRADriver, node))
	}
	if r.ShareID == nil {
		problems = append(problems, "claim "+claim.Name+": no shareID")
	}
	mem, core := r.ConsumedCapacity[protocol.DRACapacityMemory], r.ConsumedCapacity[protocol.DRACapacityCores]
	if mem.Value() != memoryGiB<<30 || core.Value() != cores {
		problems = append(problems, fmt.Sprintf("claim %s: consumedCapacity memory %s cores %s, want %dGi and %d", claim.Name, mem.String(), core.String(), memoryGiB, cores))
	}
	if !slices.ContainsFunc(claim.Status.ReservedFor, func(c resourceapi.ResourceClaimConsumerReference) bool { return c.UID == p.UID }) {
		problems = append(problems, "claim "+claim.Name+": the pod is not in reservedFor")
	}
	asg, err := protocol.DecodeAssignment([]byte(p.Annotations[protocol.AnnotationAssignment]))
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("assignment: %v", err))
	case len(asg.Containers) != 1 || len(asg.Containers[0].Slices) != 1:
		problems = append(problems, fmt.Sprintf("assignment %+v: want one container with one slice", asg.Containers))
	default:
		s := asg.Containers[0].Slices[0]
		if s.Index != card || s.MemoryGiB != memoryGiB || s.Cores != cores {
			problems = append(problems, fmt.Sprintf("assignment card %d, %d GiB, %d cores; the claim's card %d, %d GiB, %d cores", s.Index, s.MemoryGiB, s.Cores, card, memoryGiB, cores))
		}
	}
	return card, problems
}

// claimSpecFiles are the agent's CDI specs of a claim (kind
// claim.gpu.qgpu.io/slice, device <claim UID>_<request>) in the node's
// CDI directory.
func claimSpecFiles(nodeDir string, uid types.UID) []string {
	if uid == "" {
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(nodeDir, "cdi-dynamic", "*"+string(uid)+"*"))
	return files
}

// claimSpecEdits reads the claim's one spec and returns its device's edits.
func claimSpecEdits(nodeDir string, uid types.UID) (cdispec.ContainerEdits, error) {
	files := claimSpecFiles(nodeDir, uid)
	if len(files) != 1 {
		return cdispec.ContainerEdits{}, fmt.Errorf("claim %s: %d CDI specs in the node's CDI directory (%v), want 1", uid, len(files), files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		return cdispec.ContainerEdits{}, err
	}
	var spec cdispec.Spec
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("%s: %w", files[0], err)
	}
	if spec.Kind != "claim.gpu.qgpu.io/slice" || len(spec.Devices) != 1 {
		return cdispec.ContainerEdits{}, fmt.Errorf("%s: kind %q with %d devices, want claim.gpu.qgpu.io/slice with 1", files[0], spec.Kind, len(spec.Devices))
	}
	return spec.Devices[0].ContainerEdits, nil
}

// checkpointed counts the entries of each claim UID in the agent's
// checkpoint on the node.
func checkpointed(nodeDir string) (map[types.UID]int, error) {
	raw, err := os.ReadFile(filepath.Join(nodeDir, "kubelet", "plugins", protocol.DRADriver, "checkpoint.json"))
	if err != nil {
		return nil, err
	}
	var f struct {
		Claims []struct {
			UID types.UID `json:"uid"`
		} `json:"claims"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("the agent's checkpoint: %w", err)
	}
	out := map[types.UID]int{}
	for _, c := range f.Claims {
		out[c.UID]++
	}
	return out, nil
}
