package priority

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// ReasonInterceptionBypassed is the Event reason on an offline pod that
// computed while HAMi-core blocked its launches.
const ReasonInterceptionBypassed = "QGPUInterceptionBypassed"

// HAMi-core's block holds back the launches its rate limiter sees; some
// do not pass it (cuGraphLaunch, cooperative launches), so a pod that
// uses them computes while the metrics, the Event and its annotation say
// it is suspended. NVML's per-process samples tell: a blocked pod's
// process with SM use above BusyUtil, in a sample taken bypassGrace after
// the block (kernels queued before it drain; a sample covers the period
// up to its timestamp), moves the pod to the cgroup freezer for good.

// bypassGrace is how long after a block a blocked pod may still compute.
func (c *Controller) bypassGrace() time.Duration { return 2 * c.cfg.SampleStale }

// checkBypass moves to the freezer every offline pod of cd that is
// blocked through its regions but computes.
func (c *Controller) checkBypass(ctx context.Context, cd *card, now time.Time) {
	var blocked []*offline
	for _, uid := range cd.offline {
		if p := c.pods[uid]; p != nil && p.mech == MechInterception && p.frozen != "" && now.Sub(p.frozenAt) > c.bypassGrace() {
			blocked = append(blocked, p)
		}
	}
	if len(blocked) == 0 {
		return
	}
	samples, err := c.processSamples(cd, now)
	if err != nil {
		return // the online side fails open on NVML errors and reports them
	}
	for _, s := range samples {
		if s.SmUtil <= c.cfg.BusyUtil {
			continue
		}
		p := c.pods[c.podOf(s.Pid)]
		if p == nil || !slices.Contains(blocked, p) || p.mech != MechInterception ||
			!time.UnixMicro(int64(s.TimeStamp)).After(p.frozenAt.Add(c.bypassGrace())) {
			continue
		}
		c.bypassed(ctx, p, s.Pid, s.SmUtil)
	}
}

// bypassed freezes p's containers, then lets go of its regions' block,
// and keeps it on the freezer. A pod that cannot be frozen stays blocked
// (better than nothing) and is retried at the next sample.
func (c *Controller) bypassed(ctx context.Context, p *offline, pid, util uint32) {
	logger := klog.FromContext(ctx)
	if _, err := c.freeze(ctx, p, true); err != nil || len(p.frozenDirs) == 0 {
		p.logOnce(ctx, "bypass-nofreeze", "Offline pod computes through HAMi-core's block but cannot be frozen", "pid", pid, "smUtil", util, "err", err)
		return
	}
	if err := c.block(p, false); err != nil {
		logger.Error(err, "Letting go of the regions of a frozen offline pod", "pod", klog.KRef(p.namespace, p.name))
	}
	p.mech, p.bypassed = MechFreezer, true
	logger.Info("Offline pod computed while HAMi-core blocked its launches; the cgroup freezer suspends it from now on",
		"pod", klog.KRef(p.namespace, p.name), "pid", pid, "smUtil", util, "card", p.card.UUID)
	if c.cfg.Recorder != nil {
		ref := &v1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.namespace, Name: p.name, UID: types.UID(p.uid)}
		c.cfg.Recorder.Event(ref, v1.EventTypeWarning, ReasonInterceptionBypassed, fmt.Sprintf(
			"Process %d used %d%% of card %d's SMs while its kernel launches were held back (launches HAMi-core does not intercept, such as CUDA graphs); frozen with the cgroup freezer instead", pid, util, p.card.Index))
	}
}

// processSamples reads the card's NVML process samples newer than the last
// seen, once per poll: the online activity and the bypass check share them.
func (c *Controller) processSamples(cd *card, now time.Time) ([]nvml.ProcessUtilizationSample, error) {
	if !cd.samplesAt.IsZero() && cd.samplesAt.Equal(now) {
		return cd.samples, cd.samplesErr
	}
	cd.samples, cd.samplesAt, cd.samplesErr = nil, now, nil
	dev, ok := c.cfg.Devices[cd.id.UUID]
	if !ok {
		cd.samplesErr = fmt.Errorf("card %s: no NVML device", cd.id.UUID)
		return nil, cd.samplesErr
	}
	samples, ret := dev.GetProcessUtilization(cd.nvml.lastSeen)
	switch ret {
	case nvml.SUCCESS, nvml.ERROR_NOT_FOUND: // NOT_FOUND: no sample newer than lastSeen
	default:
		cd.samplesErr = fmt.Errorf("card %s: process utilization: %s", cd.id.UUID, ret.Error())
		return nil, cd.samplesErr
	}
	for _, s := range samples {
		cd.nvml.lastSeen = max(cd.nvml.lastSeen, s.TimeStamp)
	}
	cd.samples = samples
	return samples, nil
}
