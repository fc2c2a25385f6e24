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
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
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
	// Vocabulary is the system the pod was written for (vocab.Native: qGPU's
	// own resources); its containers are translated (docs/vocabularies.md).
	Vocabulary vocab.Vocabulary
	// NodeExclusive: the pod takes every card of its node, and no other pod
	// that asks for GPUs may share the node with it (T9k's nvidia-gpu-node;
	// docs/node-exclusive.md).
	NodeExclusive bool
	// CoreLimit is the compute ceiling (percent of a card) that shared
	// containers may burst to above their cores (vcuda-core-limit); 0: none.
	CoreLimit int64
	// Claims, for a pod that asks through ResourceClaims (ParseClaims), are
	// the claims behind Containers, one per container, in the same order.
	Claims []ClaimRef
	// OtherClaims are the pod's claims (pod.spec.resourceClaims names) that
	// ask for no qGPU DeviceClass: another driver's devices, which
	// qgpu-scheduler does not allocate (docs/dra.md#the-scheduler-profile).
	OtherClaims []string
	// Shared are the pod's qGPU claims that another pod's cycle already
	// allocated (a claim several pods use): the pod joins them on their
	// node and holds nothing of its own (docs/dra.md#shared-claims). A pod
	// has either Shared or Containers, not both.
	Shared []SharedClaim
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
	// MemoryPercent, when > 0, is the memory as a percent of each of the
	// container's cards; MemoryGiB is 0 until Resolve.
	MemoryPercent int64
	// AllCards: the container takes every card of its node; Cards and Cores
	// are 0 until Resolve.
	AllCards bool
}

// PerCardMemoryGiB is the memory the container takes on each of its cards.
func (c Container) PerCardMemoryGiB() int64 { return c.MemoryGiB / int64(c.Cards) }

// PerCardCores is the core budget the container takes on each of its cards.
func (c Container) PerCardCores() int64 { return c.Cores / int64(c.Cards) }

// Parse returns the pod's qGPU request, nil (and no error) when the pod asks
// for no qGPU resource, or an error wrapping ErrInvalid that names the rule,
// the field and the value.
//
// Pods written for another system (docs/vocabularies.md) are read with the
// default Options; the scheduler uses ParseWith and its args.
func Parse(pod *v1.Pod) (*Request, error) {
	return ParseWith(pod, Options{})
}

// ParseWith is Parse with the cluster's vocabulary settings. A request of a
// vocabulary may be Relative (memory in percent of a card, or the whole
// node): Resolve it against a node's cards before placing it.
func ParseWith(pod *v1.Pod, opts Options) (*Request, error) {
	voc, err := vocab.Detect(pod, protocol.Resources[:], opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if voc != vocab.Native {
		return parseVocabulary(pod, voc, opts)
	}
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
	if req.UseTypes, req.NoUseTypes, err = modelFilters(pod); err != nil {
		return nil, err
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
// names a qGPU resource or one of another vocabulary's (but nvidia.com/gpu
// alone), valid or not: such a pod holds those resources on
// its node in kube-scheduler's accounting.
func Asks(pod *v1.Pod) bool {
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if _, ok := firstQGPUResource(&cs[i]); ok {
				return true
			}
			if _, ok := firstVocabularyResource(&cs[i]); ok {
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

// firstVocabularyResource is the first resource of another system's
// vocabulary that c names. nvidia.com/gpu alone is left out: whether it is
// HAMi's depends on the cluster's settings (ParseWith).
func firstVocabularyResource(c *v1.Container) (string, bool) {
	for _, v := range vocab.All {
		for _, name := range vocab.Resources(v) {
			if name == vocab.HAMiGPU {
				continue
			}
			if _, ok := quantity(c, name); ok {
				return name, true
			}
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

// modelFilters reads use-gputype and nouse-gputype; a model in both is an error.
func modelFilters(pod *v1.Pod) (use, nouse []string, err error) {
	if use, err = modelList(pod, protocol.AnnotationUseGPUType); err != nil {
		return nil, nil, err
	}
	if nouse, err = modelList(pod, protocol.AnnotationNoUseGPUType); err != nil {
		return nil, nil, err
	}
	for _, m := range use {
		if slices.Contains(nouse, m) {
			return nil, nil, invalidf("annotations %s and %s both name model %q", protocol.AnnotationUseGPUType, protocol.AnnotationNoUseGPUType, m)
		}
	}
	return use, nouse, nil
}

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
