package qgpu

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/quota"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// quotaCycle is what PreFilter learned of the pod's namespace quota: the
// limits the pod would break wherever a matching card takes it. The
// cycle's request leaves those models out (as nouse-gputype would), so that
// Filter and Reserve place the pod only on cards whose models have room.
type quotaCycle struct {
	// original is the pod's own request, before the models over quota
	// were left out: Filter places it to tell a node refused for quota
	// from one refused for its cards.
	original *request.Request
	exceeded []quota.Exceeded
}

// quotaPreFilter checks the pod against its namespace's limits before any
// card is chosen. A pod over a limit on every model (the "*" key) can go
// nowhere; over limits on some models, it may still go to the others.
// UnschedulableAndUnresolvable: removing other namespaces' pods does not
// help, and the pod is retried when a pod of any namespace frees its slices
// or the limits change (waiting.go).
func (p *QGPU) quotaPreFilter(pod *v1.Pod, req *request.Request) (*request.Request, *quotaCycle, *fwk.Status) {
	if req.NodeExclusive || !p.shared.quota.Limited(pod.Namespace) {
		return req, nil, nil
	}
	exceeded := p.shared.quota.Check(pod.Namespace, quota.Ask(req))
	if len(exceeded) == 0 {
		return req, nil, nil
	}
	for _, e := range exceeded {
		if e.Limit.Model == quota.AnyModel {
			p.rejections.rejected(pointPreFilter, reasonQuota)
			return nil, nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, e.Error())
		}
	}
	narrowed := *req
	narrowed.NoUseTypes = slices.Clone(req.NoUseTypes)
	for _, e := range exceeded {
		if m := strings.ToLower(e.Limit.Model); !slices.Contains(narrowed.NoUseTypes, m) {
			narrowed.NoUseTypes = append(narrowed.NoUseTypes, m)
		}
	}
	return &narrowed, &quotaCycle{original: req, exceeded: exceeded}, nil
}

// quotaReason is Filter's reason for a node the cycle's request (without
// the models over quota) does not fit. When the pod's own request would fit
// the node, on a card of a model over quota, it is that limit's reason
// (byQuota); when the pod's own request does not fit either, it is the
// node's reason for that request, so that a pod too big for a card is not
// told that no card of its model exists; else reason as given. Each limit's
// reason is the same on every node, so kube-scheduler's summary counts
// nodes per limit.
func (p *QGPU) quotaReason(s *cycleState, name string, nodeInfo fwk.NodeInfo, reason string) (_ string, byQuota bool) {
	var buf [cardBuf]ledger.Card
	var choices [cardBuf]placement.Choice
	n := p.nodeCards(s, name, buf[:0])
	if n.Invalid != "" {
		return reason, false
	}
	env := p.env(s, nodeInfo)
	chosen, own := placement.PlaceIn(n.Cards, n.Mixed, s.quota.original, p.cardPolicy, &env, choices[:0])
	if own != "" {
		return own, false
	}
	for _, c := range chosen {
		model := n.Cards[c.Card].Model
		for _, e := range s.quota.exceeded {
			if e.Limit.Matches(model) {
				return e.Error(), true
			}
		}
	}
	return reason, false
}

// quotaReserve checks the chosen slices against the namespace's limits
// once more, with the models of the cards chosen: the tally may have grown
// since PreFilter (a pod bound by another scheduler, seen by the informer).
// It runs under the node's lock, in Reserve's choose.
func (p *QGPU) quotaReserve(pod *v1.Pod, class protocol.Class, cards []ledger.Card, slices []protocol.Slice) error {
	if !p.shared.quota.Limited(pod.Namespace) {
		return nil
	}
	models := make([]string, len(slices))
	for i, s := range slices {
		for _, c := range cards {
			if c.Index == s.Index && c.UUID == s.UUID {
				models[i] = c.Model
			}
		}
	}
	if ex := p.shared.quota.CheckSlices(pod.Namespace, quota.HoldingUse(class, slices, models)); len(ex) > 0 {
		return ex[0]
	}
	return nil
}

// watchQuota feeds the tally's limits from the qgpu-quota ConfigMap, with
// an informer of that one object in the scheduler's namespace (RBAC: get,
// list and watch on it alone; manifests/scheduler/rbac.yaml).
func (s *shared) watchQuota(ctx context.Context, h fwk.Handle) (cache.InformerSynced, error) {
	ns := quota.Namespace(os.Getenv)
	f := informers.NewSharedInformerFactoryWithOptions(h.ClientSet(), 0,
		informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", quota.ConfigMapName).String()
		}))
	inf := f.Core().V1().ConfigMaps().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.quotaChanged(ctx, h, obj.(*v1.ConfigMap)) },
		UpdateFunc: func(_, obj any) { s.quotaChanged(ctx, h, obj.(*v1.ConfigMap)) },
		DeleteFunc: func(any) { s.quotaChanged(ctx, h, nil) },
	})
	if err != nil {
		return nil, fmt.Errorf("watching %s/%s: %w", ns, quota.ConfigMapName, err)
	}
	f.Start(ctx.Done())
	return reg.HasSynced, nil
}

// quotaChanged takes the ConfigMap's limits (nil: deleted). A broken entry
// keeps its namespace's last valid limits (or, with none, closes the
// namespace: quota.Tally) and is reported, naming the field and the value,
// in the log and as an event on the ConfigMap. When limits
// changed, the pods waiting for room are retried.
func (s *shared) quotaChanged(ctx context.Context, h fwk.Handle, cm *v1.ConfigMap) {
	logger := klog.FromContext(ctx)
	specs, errs := quota.ParseConfigMap(cm)
	changed := s.quota.SetConfigMap(specs, errs)
	for ns, err := range errs {
		logger.Info("invalid qGPU quota entry; the namespace keeps its last valid limits", "configmap", klog.KObj(cm), "namespace", ns, "err", err)
		if rec := h.EventRecorder(); rec != nil && cm != nil {
			rec.Eventf(cm, nil, v1.EventTypeWarning, "InvalidQGPUQuota", "Scheduling", "%s", truncate(err.Error(), 512))
		}
	}
	if changed {
		logger.V(4).Info("qGPU quota changed", "namespaces", len(specs))
		s.waiting.wake(logger, true)
	}
}
