// Package qgpu is the qGPU scheduling-framework plugin: it places general,
// online and offline pods card by card (docs/ledger.md) and keeps the per-card
// ledger that makes sure no card is ever oversubscribed.
package qgpu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/fastpath"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/fragcache"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
)

// Name is the plugin's name in profiles.
const Name = "QGPU"

// QGPU is the plugin, one per profile that enables it. The ledger, the
// workload and the informer handlers are shared by all of a process's
// profiles (shared.go).
type QGPU struct {
	handle     fwk.Handle
	shared     *shared
	ledger     *ledger.Ledger
	nodePolicy placement.Policy
	cardPolicy placement.Policy
	synced     []cache.InformerSynced
	// allSynced is set once every synced func reported true (waitSynced).
	allSynced atomic.Bool
	// workload is learned from the pods placed, for fgd and fragfit.
	workload *typical.Learner
	// frags remembers each node's fragmentation between cycles.
	frags *fragcache.Cache
	// scores carries Filter's scores to Score within a cycle.
	scores fastpath.Stash
	// refs finds Filter's nodes in the ledger without their names.
	refs fastpath.Refs
	// bindOnce and binds cache bindsItself.
	bindOnce sync.Once
	binds    bool
	// live is set when the handle has informers and a snapshot (not in unit tests).
	live bool
	// rejections and placements are the profile's counters (metrics.go).
	rejections rejections
	placements *placementCounters
	// vocab is the profile's vocabulary settings (vocabulary.go).
	vocab vocabularies
	// claims reads ResourceClaims and DeviceClasses (claims.go); nil
	// without informers. draOnce and dra cache runsDynamicResources.
	claims  *claimAccess
	draOnce sync.Once
	dra     bool
	// stale releases the claims dead cycles left allocated (stale.go).
	stale *staleClaims
}

var (
	_ fwk.PreFilterPlugin   = &QGPU{}
	_ fwk.FilterPlugin      = &QGPU{}
	_ fwk.ScorePlugin       = &QGPU{}
	_ fwk.ReservePlugin     = &QGPU{}
	_ fwk.PreBindPlugin     = &QGPU{}
	_ fwk.BindPlugin        = &QGPU{}
	_ fwk.EnqueueExtensions = &QGPU{}
)

// New builds the plugin from its args and starts feeding the ledger from the
// scheduler's informers.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	a, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	path := field.NewPath("pluginConfig").Key(Name).Child("args")
	if errs := args.Validate(path, a); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	registerMetrics()
	p := &QGPU{
		handle:     h,
		nodePolicy: placement.Policy(a.NodePolicy),
		cardPolicy: placement.Policy(a.CardPolicy),
		rejections: registered.rejections,
		placements: newPlacementCounters(placement.Policy(a.NodePolicy), placement.Policy(a.CardPolicy)),
		vocab:      newVocabularies(a),
		frags:      &fragcache.Cache{},
	}
	p.stale = newStaleClaims(ctx, p)
	if h == nil || h.SharedInformerFactory() == nil {
		// Unit tests that feed the ledger by hand.
		s := newShared(a, nil)
		if h != nil {
			s.recorder = h.EventRecorder()
		}
		p.use(ctx, s)
		return p, nil
	}
	s, err := sharedFor(ctx, h, a, path)
	if err != nil {
		return nil, err
	}
	p.use(ctx, s)
	p.live = true
	resources := h.SharedInformerFactory().Resource().V1()
	p.claims = &claimAccess{claims: resources.ResourceClaims().Lister(), classes: resources.DeviceClasses().Lister(), slices: resources.ResourceSlices().Lister()}
	p.synced = append(p.synced[:len(p.synced):len(p.synced)], resources.ResourceClaims().Informer().HasSynced,
		resources.DeviceClasses().Informer().HasSynced, resources.ResourceSlices().Informer().HasSynced)
	return p, nil
}

// use takes the shared state; its cards count in the pool metrics while
// ctx (the profile's) lasts.
func (p *QGPU) use(ctx context.Context, s *shared) {
	p.shared = s
	p.ledger, p.workload, p.synced = s.ledger, s.workload, s.synced
	context.AfterFunc(ctx, registered.pools.add(s.ledger))
}

// decodeArgs accepts the typed args (from a config file) or none (defaults).
func decodeArgs(obj runtime.Object) (*args.QGPUArgs, error) {
	switch a := obj.(type) {
	case nil:
		return &args.QGPUArgs{NodePolicy: string(placement.FragFit), CardPolicy: string(placement.FragFit), VCUDAMemoryUnitMiB: 1}, nil
	case *args.QGPUArgs:
		return a, nil
	}
	return nil, fmt.Errorf("want args of type QGPUArgs, got %T", obj)
}

// Name implements fwk.Plugin.
func (p *QGPU) Name() string { return Name }
