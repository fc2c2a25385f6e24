package qgpu

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// watchClaims feeds the ledger every allocated ResourceClaim of the qGPU
// driver: a claim holds its slices from its allocation until the
// allocation is cleared or the claim is deleted, whoever consumes it
// (ledger/claims.go says how a pod placed with the claim and the claim
// count its slices once). So a pod that joins another's claim, or a claim
// the resource-claim controller has not yet deallocated after its pod
// finished, keeps its memory out of other pods' reach.
func (s *shared) watchClaims(ctx context.Context, f informers.SharedInformerFactory) (cache.InformerSynced, error) {
	logger := klog.FromContext(ctx)
	reg, err := f.Resource().V1().ResourceClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.claimChanged(logger, obj.(*resourceapi.ResourceClaim)) },
		UpdateFunc: func(_, obj any) { s.claimChanged(logger, obj.(*resourceapi.ResourceClaim)) },
		DeleteFunc: func(obj any) {
			if c, ok := tombstone[*resourceapi.ResourceClaim](obj); ok {
				s.claimReleased(logger, c)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watching ResourceClaims: %w", err)
	}
	return reg.HasSynced, nil
}

// claimChanged records what the claim holds now.
func (s *shared) claimChanged(logger klog.Logger, c *resourceapi.ResourceClaim) {
	held, ok := protocol.HeldByClaim(c)
	if !ok {
		s.claimReleased(logger, c)
		return
	}
	h := ledger.Holding{Node: held.Node, Class: held.Class, Namespace: c.Namespace, Slices: held.Slices}
	consumers := make([]types.UID, 0, len(c.Status.ReservedFor))
	for _, r := range c.Status.ReservedFor {
		consumers = append(consumers, r.UID)
	}
	if s.ledger.SetClaim(c.UID, h, consumers) {
		logger.V(5).Info("qGPU claim's slices recorded", "claim", klog.KObj(c), "node", held.Node, "consumers", len(consumers))
	}
}

// claimReleased forgets a claim's slices and, where that freed room, wakes
// the pods waiting for it.
func (s *shared) claimReleased(logger klog.Logger, c *resourceapi.ResourceClaim) {
	if s.ledger.ReleaseClaim(c.UID) {
		logger.V(5).Info("qGPU claim's slices freed", "claim", klog.KObj(c))
		s.waiting.wake(logger, true)
	}
}
