package qgpu

import (
	"context"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/args"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/quota"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/typical"
)

// shared is what every profile of one scheduler process that enables QGPU
// has in common: kube-scheduler builds one plugin per profile, but all
// profiles place pods on the same cards, so they must book them in one
// ledger. It holds the ledger, the informer handlers that alone write it
// (watch.go), the pods waiting for room (waiting.go), and the workload
// learned from placements. Profiles are told apart by their informer
// factory, which kube-scheduler creates once per process.
type shared struct {
	ledger   *ledger.Ledger
	workload *typical.Learner
	waiting  *waitingPods
	// quota is the namespaces' limits and use, fed by the ledger (quota.go).
	quota *quota.Tally
	// recorder records the handlers' events on pods (the first profile's);
	// nil drops them.
	recorder events.EventRecorder
	synced   []cache.InformerSynced
	// parseOpts reads the requests of bound pods for the workload (the
	// first profile's vocabulary settings; learn.go).
	parseOpts request.Options
	// maxPodsPerCard is the rule the ledger was built with; every profile
	// must agree on it.
	maxPodsPerCard int32
	// profiles counts the plugins using this state.
	profiles int
}

var processState = struct {
	sync.Mutex
	byFactory map[informers.SharedInformerFactory]*shared
}{byFactory: map[informers.SharedInformerFactory]*shared{}}

// sharedFor returns the state of h's informer factory, creating it (and
// registering the informer handlers) for the first profile. It is dropped
// when the last profile's context ends.
func sharedFor(ctx context.Context, h fwk.Handle, a *args.QGPUArgs, path *field.Path) (*shared, error) {
	f := h.SharedInformerFactory()
	processState.Lock()
	defer processState.Unlock()
	if s := processState.byFactory[f]; s != nil {
		if s.maxPodsPerCard != a.MaxPodsPerCard {
			return nil, field.Invalid(path.Child("maxPodsPerCard"), a.MaxPodsPerCard,
				fmt.Sprintf("every profile that enables %s shares one ledger and must set the same value; another profile set %d", Name, s.maxPodsPerCard))
		}
		s.waiting.addScheduler(h)
		s.profiles++
		context.AfterFunc(ctx, s.leave)
		return s, nil
	}
	s := newShared(a, h.Activate)
	s.recorder = h.EventRecorder()
	s.waiting.addScheduler(h)
	if err := s.watch(ctx, h); err != nil {
		return nil, err
	}
	quotaSynced, err := s.watchQuota(ctx, h)
	if err != nil {
		return nil, err
	}
	claimsSynced, err := s.watchClaims(ctx, f)
	if err != nil {
		return nil, err
	}
	s.synced = append(s.synced, quotaSynced, claimsSynced)
	processState.byFactory[f] = s
	context.AfterFunc(ctx, s.leave)
	return s, nil
}

func newShared(a *args.QGPUArgs, activate func(klog.Logger, map[string]*v1.Pod)) *shared {
	s := &shared{
		ledger:         ledger.New(int(a.MaxPodsPerCard)),
		workload:       typical.NewLearner(),
		waiting:        newWaitingPods(activate),
		quota:          quota.NewTally(),
		maxPodsPerCard: a.MaxPodsPerCard,
		parseOpts:      newVocabularies(a).opts,
		profiles:       1,
	}
	s.ledger.SetWatcher(quota.Feed{Tally: s.quota})
	return s
}

// leave drops the state once no profile uses it (a test that starts many
// schedulers in one process, each with its own factory).
func (s *shared) leave() {
	processState.Lock()
	defer processState.Unlock()
	if s.profiles--; s.profiles > 0 {
		return
	}
	for f, cur := range processState.byFactory {
		if cur == s {
			delete(processState.byFactory, f)
		}
	}
}
