package request

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// Options are the cluster-wide settings of the vocabularies (the plugin's args).
type Options = vocab.Options

// parseVocabulary is Parse for a pod written in another system's vocabulary
// (docs/vocabularies.md): each container's ask is translated into native
// terms, then the native rules apply. Such pods are general pods.
func parseVocabulary(pod *v1.Pod, voc vocab.Vocabulary, opts Options) (*Request, error) {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		for _, name := range vocab.Resources(voc) {
			if _, ok := quantity(c, name); ok {
				return nil, invalidf("initContainers[%s]: %s: GPU resources are supported in regular containers only", c.Name, name)
			}
		}
	}
	if value, ok := pod.Annotations[protocol.AnnotationAppClass]; ok {
		return nil, invalidf("annotation %s: value %q: online and offline pods ask in qGPU's own resources, not %s's", protocol.AnnotationAppClass, value, voc)
	}
	req := &Request{Class: protocol.ClassGeneral, Vocabulary: voc}
	var err error
	if req.UseTypes, req.NoUseTypes, err = modelFilters(pod); err != nil {
		return nil, err
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		ask, ok, err := vocab.Translate(voc, c, opts, integer)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if !ok {
			continue
		}
		ctr, err := fromAsk(c.Name, ask)
		if err != nil {
			return nil, err
		}
		req.Containers = append(req.Containers, ctr)
		req.NodeExclusive = req.NodeExclusive || ask.AllCards
	}
	if req.NodeExclusive && len(req.Containers) > 1 {
		return nil, invalidf("%s: a node-exclusive pod takes every card of its node for one container; %d containers ask for GPUs",
			vocab.T9kGPUNode, len(req.Containers))
	}
	if voc == vocab.VCUDA {
		if req.CoreLimit, err = coreLimit(pod, req.Containers); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// fromAsk applies the native bounds to a translated ask. Absolute memory is
// rounded up to whole GiB (never less than asked) and, over several whole
// cards, up to a multiple of their number so that it splits evenly.
func fromAsk(name string, a vocab.Ask) (Container, error) {
	c := Container{Name: name, Cores: a.Cores, Cards: int(a.Cards), Whole: a.Whole, MemoryPercent: a.MemoryPercent, AllCards: a.AllCards}
	if a.MemoryMiB > 0 {
		gib := (a.MemoryMiB + protocol.GiB - 1) / protocol.GiB
		if k := int64(max(c.Cards, 1)); gib%k != 0 {
			gib += k - gib%k
		}
		if gib > MaxMemoryGiB {
			return c, invalidf("containers[%s]: memory %d MiB is more than %d GiB", name, a.MemoryMiB, MaxMemoryGiB)
		}
		c.MemoryGiB = gib
	}
	return c, nil
}

// coreLimit reads the vcuda-core-limit annotation: a ceiling in percent of a
// card, at least every shared container's vcuda-core and at most 100. 0 when
// absent.
func coreLimit(pod *v1.Pod, cs []Container) (int64, error) {
	raw, ok := pod.Annotations[vocab.AnnotationVCUDACoreLimit]
	if !ok {
		return 0, nil
	}
	v, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || v < 1 || v > protocol.CoresPerCard {
		return 0, invalidf("annotation %s: value %q must be a whole number between 1 and 100", vocab.AnnotationVCUDACoreLimit, raw)
	}
	for _, c := range cs {
		if !c.Whole && v < c.Cores {
			return 0, invalidf("annotation %s: value %d is below containers[%s]'s %s %d: the ceiling cannot be under the guarantee",
				vocab.AnnotationVCUDACoreLimit, v, c.Name, vocab.VCUDACore, c.Cores)
		}
	}
	return v, nil
}

// Relative reports whether the request depends on the node's cards: memory
// as a percent of a card, or every card of the node.
func (r *Request) Relative() bool {
	for _, c := range r.Containers {
		if c.MemoryPercent > 0 || c.AllCards {
			return true
		}
	}
	return false
}

// Resolve returns the request on a node whose reference card has
// cardMemoryGiB and which has cards cards: percents become GiB, rounded up
// (ceil(P·memory/100) per card: never less than asked), and AllCards
// becomes that many whole cards. The scheduler passes the largest card of
// the node that the model filters accept, so that on a node of mixed sizes
// a slice is never smaller than its percent of the card it lands on. A
// request that is not Relative is returned as is.
func (r *Request) Resolve(cardMemoryGiB int64, cards int) (*Request, error) {
	if !r.Relative() {
		return r, nil
	}
	out := *r
	out.Containers = make([]Container, len(r.Containers))
	for i, c := range r.Containers {
		if c.AllCards {
			if cards < 1 || cards > protocol.MaxCards {
				return nil, invalidf("containers[%s]: %s: the node has %d cards", c.Name, vocab.T9kGPUNode, cards)
			}
			c.Cards, c.Cores, c.AllCards = cards, int64(cards)*protocol.CoresPerCard, false
		}
		if c.MemoryPercent > 0 {
			perCard := (c.MemoryPercent*cardMemoryGiB + 99) / 100
			if perCard < 1 || perCard*int64(c.Cards) > MaxMemoryGiB {
				return nil, invalidf("containers[%s]: %d%% of a %d GiB card is no whole GiB in range", c.Name, c.MemoryPercent, cardMemoryGiB)
			}
			c.MemoryGiB, c.MemoryPercent = perCard*int64(c.Cards), 0
		}
		out.Containers[i] = c
	}
	return &out, nil
}
