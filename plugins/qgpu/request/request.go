// Package request turns a pod into the qGPU request it makes, enforcing every
// rule of docs/design.md#what-a-pod-asks-for. It is shared by the scheduler
// plugin, the agent and the
// trace replay, and it imports nothing from the scheduler framework.
package request

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// ErrInvalid marks every rejection: a pod that can never be placed as written.
var ErrInvalid = errors.New("invalid qGPU request")

// MaxMemoryGiB bounds one container's memory request (the largest card holds 192 GiB).
const MaxMemoryGiB = 16 << 10

// Request is what a pod asks of the qGPU cards of one node.
type Request struct {
	Class protocol.Class
	// Containers are the pod's containers that ask for qGPU resources, in pod order.
	Containers []Container
	// UseTypes and NoUseTypes are lower-cased model filters (substring match).
	UseTypes, NoUseTypes []string
	// NodeExclusive: the pod takes every card of its node, and no other
	// pod that asks for GPU shares the node with it (docs/node-exclusive.md).
	NodeExclusive bool
}

// Container is one container's slice request.
type Container struct {
	Name string
	// MemoryGiB is the container's whole memory; for Cards > 1 it is split evenly.
	MemoryGiB int64
	// Cores is qgpu-core (general), qgpu-core-greedy (offline) or 0 (online).
	// For Cards > 1 it is 100 per card.
	Cores int64
	// Cards is k for a general container asking C = 100·k, else 1.
	Cards int
	// Whole is true for a general container asking C = 100·k: it takes Cards
	// whole cards exclusively. It is a field, not a test on Cores, because an
	// offline container with qgpu-core-greedy 100 also has Cores 100 and shares
	// its card.
	Whole bool
}

// PerCardMemoryGiB is the memory the container takes on each of its cards.
func (c Container) PerCardMemoryGiB() int64 { return c.MemoryGiB / int64(c.Cards) }

// PerCardCores is the core budget the container takes on each of its cards.
func (c Container) PerCardCores() int64 { return c.Cores / int64(c.Cards) }

// Parse returns the pod's qGPU request, nil (and no error) when the pod asks
// for no qGPU resource, or an error wrapping ErrInvalid that names the rule,
// the field and the value.
func Parse(pod *v1.Pod) (*Request, error) {
	asks, err := scanPod(pod)
	if err != nil || !asks {
		return nil, err
	}
	value, present := pod.Annotations[protocol.AnnotationAppClass]
	class, err := protocol.ParseClass(value, present)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := checkNoWholeGPU(pod); err != nil {
		return nil, err
	}
	req := &Request{Class: class}
	if req.UseTypes, err = modelList(pod, protocol.AnnotationUseGPUType); err != nil {
		return nil, err
	}
	if req.NoUseTypes, err = modelList(pod, protocol.AnnotationNoUseGPUType); err != nil {
		return nil, err
	}
	for _, m := range req.UseTypes {
		if slices.Contains(req.NoUseTypes, m) {
			return nil, invalidf("annotations %s and %s both name model %q", protocol.AnnotationUseGPUType, protocol.AnnotationNoUseGPUType, m)
		}
	}
	for i := range pod.Spec.Containers {
		c, ok, err := parseContainer(class, &pod.Spec.Containers[i])
		if err != nil {
			return nil, err
		}
		if ok {
			req.Containers = append(req.Containers, c)
		}
	}
	if err := checkPod(req); err != nil {
		return nil, err
	}
	return req, nil
}

// scanPod reports whether any container asks for a qGPU resource, and rejects
// qGPU resources where they cannot be honoured (init and ephemeral containers).
func scanPod(pod *v1.Pod) (bool, error) {
	for _, c := range pod.Spec.InitContainers {
		if name, ok := firstQGPUResource(&c); ok {
			return false, invalidf("initContainers[%s]: %s: qGPU resources are supported in regular containers only", c.Name, name)
		}
	}
	for i := range pod.Spec.Containers {
		if _, ok := firstQGPUResource(&pod.Spec.Containers[i]); ok {
			return true, nil
		}
	}
	return false, nil
}

// checkNoWholeGPU rejects nvidia.com/gpu anywhere in a qGPU pod: a qGPU node
// never hands cards out whole, and a pod needs a qGPU node, so such a pod could
// never start wherever it was placed.
func checkNoWholeGPU(pod *v1.Pod) error {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			r := cs[i].Resources
			_, inLimits := r.Limits[ResourceWholeGPU]
			_, inRequests := r.Requests[ResourceWholeGPU]
			if inLimits || inRequests {
				return invalidf("containers[%s]: %s cannot be combined with qGPU resources in one pod", cs[i].Name, ResourceWholeGPU)
			}
		}
	}
	return nil
}

// ResourceWholeGPU is the whole-card resource of NVIDIA's device plugin.
const ResourceWholeGPU v1.ResourceName = "nvidia.com/gpu"

// Asks reports whether any container of the pod, init containers included,
// names a qGPU resource, valid or not: such a pod holds those resources on
// its node in kube-scheduler's accounting.
func Asks(pod *v1.Pod) bool {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if _, ok := firstQGPUResource(&cs[i]); ok {
				return true
			}
		}
	}
	return false
}

func firstQGPUResource(c *v1.Container) (string, bool) {
	for _, name := range protocol.Resources {
		if _, ok := quantity(c, name); ok {
			return name, true
		}
	}
	return "", false
}

// quantity reads a resource from limits, falling back to requests: for
// extended resources the API server requires them equal when both are set.
func quantity(c *v1.Container, name string) (resource.Quantity, bool) {
	if q, ok := c.Resources.Limits[v1.ResourceName(name)]; ok {
		return q, true
	}
	q, ok := c.Resources.Requests[v1.ResourceName(name)]
	return q, ok
}

// integer reads a resource as a whole number and reports whether it is set;
// absent is 0, false.
//
// Value and MilliValue alone are not enough: they round up (0.9999999999
// would read as 1) and wrap or saturate on overflow (1e19 reads as 0, which
// looks like an absent resource). AsInt64 is exact but refuses exact whole
// numbers such as 1.0 and 1Pi. So: bound the value first, then read it, then
// check with Cmp (exact) that reading it lost nothing.
func integer(c *v1.Container, name string) (int64, bool, error) {
	q, ok := quantity(c, name)
	if !ok {
		return 0, false, nil
	}
	if l, ok := c.Resources.Limits[v1.ResourceName(name)]; ok {
		if r, ok := c.Resources.Requests[v1.ResourceName(name)]; ok && r.Cmp(l) != 0 {
			return 0, true, invalidf("containers[%s]: %s: request %s must equal limit %s", c.Name, name, r.String(), l.String())
		}
	}
	if q.Cmp(maxInt64) > 0 || q.Cmp(minInt64) < 0 {
		return 0, true, invalidf("containers[%s]: %s: value %s is out of range", c.Name, name, q.String())
	}
	v := q.Value()
	if whole := resource.NewQuantity(v, resource.DecimalSI); whole.Cmp(q) != 0 {
		return 0, true, invalidf("containers[%s]: %s: value %s must be a whole number", c.Name, name, q.String())
	}
	return v, true, nil
}

var (
	maxInt64 = *resource.NewQuantity(math.MaxInt64, resource.DecimalSI)
	minInt64 = *resource.NewQuantity(math.MinInt64, resource.DecimalSI)
)

func modelList(pod *v1.Pod, key string) ([]string, error) {
	raw, ok := pod.Annotations[key]
	if !ok {
		return nil, nil
	}
	var out []string
	for _, m := range strings.Split(raw, ",") {
		if m = strings.ToLower(strings.TrimSpace(m)); m != "" {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, invalidf("annotation %s: value %q names no GPU model", key, raw)
	}
	return out, nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
