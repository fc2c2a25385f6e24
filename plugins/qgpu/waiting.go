package qgpu

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// waitingPods closes the gap between the queueing hints, which only decide,
// and the informer handlers, which alone write the ledger. The informer runs
// the queue's handler and the ledger's in no set order: when the queue
// retries a pod on a node deletion or a node change before the ledger's
// handler has freed the slices or read the new cards, the retry still sees
// the node full and the pod would wait for the next event (or the queue's
// five-minute flush). So the ledger's handler, once it has changed the
// ledger in a way that adds room, activates the pods still waiting for
// qGPU resources; for a pod in a scheduling cycle, Activate makes the queue
// retry it when the cycle fails. A pod the hint already requeued and that
// fits now is not in the queue's unschedulable set, and Activate ignores it.
type waitingPods struct {
	activate func(klog.Logger, map[string]*v1.Pod)
	mu       sync.Mutex
	// schedulers are the profiles' scheduler names.
	schedulers map[string]bool
	pods       map[string]waitingPod
}

type waitingPod struct {
	pod *v1.Pod
	// mixedOnly: an online or offline pod, which only a mixed node can take.
	mixedOnly bool
}

// profileNamer is the part of the framework that knows its profile's name.
type profileNamer interface{ ProfileName() string }

func newWaitingPods(activate func(klog.Logger, map[string]*v1.Pod)) *waitingPods {
	return &waitingPods{activate: activate, schedulers: map[string]bool{}, pods: map[string]waitingPod{}}
}

func (w *waitingPods) addScheduler(h fwk.Handle) {
	if n, ok := h.(profileNamer); ok {
		w.mu.Lock()
		w.schedulers[n.ProfileName()] = true
		w.mu.Unlock()
	}
}

// track records whether pod waits for one of these schedulers to place its
// qGPU request. It runs in the ledger's pod handler, for every pod event.
func (w *waitingPods) track(pod *v1.Pod) {
	key := pod.Namespace + "/" + pod.Name
	w.mu.Lock()
	defer w.mu.Unlock()
	ours := len(w.schedulers) == 0 || w.schedulers[pod.Spec.SchedulerName]
	if pod.Spec.NodeName != "" || !ours || pod.DeletionTimestamp != nil || !(request.Asks(pod) || request.UsesClaims(pod)) {
		delete(w.pods, key)
		return
	}
	mixedOnly := false
	if req, err := request.Parse(pod); err == nil && req != nil {
		mixedOnly = req.Class != protocol.ClassGeneral
	}
	w.pods[key] = waitingPod{pod: pod, mixedOnly: mixedOnly}
}

func (w *waitingPods) forget(pod *v1.Pod) {
	w.mu.Lock()
	delete(w.pods, pod.Namespace+"/"+pod.Name)
	w.mu.Unlock()
}

// wake activates the waiting pods that the change can help: every one when
// slices were freed, and only general pods when a node that is not mixed
// changed.
func (w *waitingPods) wake(logger klog.Logger, mixedNode bool) {
	w.mu.Lock()
	pods := make(map[string]*v1.Pod, len(w.pods))
	for key, p := range w.pods {
		if mixedNode || !p.mixedOnly {
			pods[key] = p.pod
		}
	}
	w.mu.Unlock()
	if len(pods) > 0 && w.activate != nil {
		logger.V(5).Info("activating pods waiting for qGPU room", "pods", len(pods))
		w.activate(logger, pods)
	}
}
