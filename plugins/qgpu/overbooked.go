package qgpu

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

// ReasonOverbooked is the reason of the Warning event on a bound pod that
// the informer showed beyond its cards' capacity.
const ReasonOverbooked = "QGPUOverbooked"

// overbooked reports a bound pod the ledger recorded beyond a card's rules
// (ledger.ObserveChecked): the API is the truth, so the ledger accounts it,
// but the scheduler should never have let it happen, and the agent may
// refuse its grant (QGPUGrantRefused). One Warning event on the pod names
// the node, the cards and what is over; the counter counts the pod once per
// rule it breaks.
func (s *shared) overbooked(logger klog.Logger, pod *v1.Pod, node string, over []ledger.Overbooking) {
	cards := make([]string, len(over))
	rules := map[ledger.Rule]bool{}
	for i, o := range over {
		cards[i] = o.String()
		for _, r := range o.Rules {
			rules[r] = true
		}
	}
	what := strings.Join(cards, "; ")
	logger.Info("Bound qGPU pod overbooks its cards; recorded as the API shows it", "pod", klog.KObj(pod), "node", node, "over", what)
	if s.recorder != nil {
		s.recorder.Eventf(pod, nil, v1.EventTypeWarning, ReasonOverbooked, "Scheduling",
			"bound to node %s beyond its cards' capacity: %s", node, truncate(what, 512))
	}
	for r := range rules {
		overbookedTotal.WithLabelValues(string(r)).Inc()
	}
}
