package qgpu

import (
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// ReasonUnresolved is Filter's reason for a node whose cards cannot express
// a relative request (a percent of a card too small for one GiB, or no card
// for a node-exclusive pod).
const ReasonUnresolved = "the pod's share does not resolve on this node's cards"

// vocabReasons are Filter's constant reasons for a node that does not take
// a vocabulary (docs/vocabularies.md#enabling-a-vocabulary).
var vocabReasons = func() map[vocab.Vocabulary]string {
	m := map[vocab.Vocabulary]string{}
	for _, v := range vocab.All {
		m[v] = "node does not take " + string(v) + " pods (label " + vocab.Label(v) + "=" + protocol.LabelValueEnable + ")"
	}
	return m
}()

// vocabularies is a profile's vocabulary settings.
type vocabularies struct {
	opts    request.Options
	cluster map[vocab.Vocabulary]bool
}

func newVocabularies(a *args.QGPUArgs) vocabularies {
	v := vocabularies{opts: request.Options{VCUDAMemoryUnitMiB: a.VCUDAMemoryUnitMiB}, cluster: map[vocab.Vocabulary]bool{}}
	for _, name := range a.Vocabularies {
		if voc, err := vocab.Parse(name); err == nil { // validated in New
			v.cluster[voc] = true
		}
	}
	v.opts.HAMiWholeGPU = v.cluster[vocab.HAMi]
	return v
}

// parse reads a pod with the profile's vocabulary settings.
func (p *QGPU) parse(pod *v1.Pod) (*request.Request, error) {
	if req, err := p.parseClaims(pod); req != nil || err != nil {
		return req, err
	}
	return request.ParseWith(pod, p.vocab.opts)
}

// vocabularyReason is "" when node takes the request's vocabulary: native
// requests, vocabularies the profile enables for every node, and those the
// node's own label enables.
func (p *QGPU) vocabularyReason(req *request.Request, node *v1.Node) string {
	if req.Vocabulary == vocab.Native || p.vocab.cluster[req.Vocabulary] {
		return ""
	}
	if node != nil && node.Labels[vocab.Label(req.Vocabulary)] == protocol.LabelValueEnable {
		return ""
	}
	return vocabReasons[req.Vocabulary]
}

// resolved caches a relative request per shape of node for one cycle
// (Filter runs on many nodes at once).
type resolved struct {
	mu    sync.Mutex
	byKey map[[2]int64]*request.Request
}

// reqOn is the cycle's request on node n: s.req itself unless it is
// relative, else resolved against the largest card of n that its model
// filters accept and the number of n's cards (request.Resolve). "" or
// ReasonUnresolved.
func (s *cycleState) reqOn(n ledger.Node) (*request.Request, string) {
	if s.resolved == nil {
		return s.req, ""
	}
	mem := largestCard(s.req, n)
	key := [2]int64{mem, int64(len(n.Cards))}
	s.resolved.mu.Lock()
	defer s.resolved.mu.Unlock()
	if r, ok := s.resolved.byKey[key]; ok {
		return r, ""
	}
	r, err := s.req.Resolve(mem, len(n.Cards))
	if err != nil {
		return nil, ReasonUnresolved
	}
	if s.resolved.byKey == nil {
		s.resolved.byKey = map[[2]int64]*request.Request{}
	}
	s.resolved.byKey[key] = r
	return r, ""
}

// largestCard is the memory of the largest card of n that req's model
// filters accept: a percent of it is never less than that percent of the
// card the slice lands on.
func largestCard(req *request.Request, n ledger.Node) int64 {
	var mem int64
	for _, c := range n.Cards {
		if req.MatchesModel(c.Model) {
			mem = max(mem, c.MemoryGiB)
		}
	}
	return mem
}
