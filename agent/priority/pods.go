package priority

import (
	"context"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// CardID names a card in metrics and logs.
type CardID struct {
	Index int
	UUID  string
}

// card is what the controller knows of one card.
type card struct {
	id         CardID
	online     map[string]bool // pod UIDs
	offline    []string        // pod UIDs, sorted: a stable order for time slices
	nvml       nvmlActivity
	lastLaunch time.Time // the last online launch seen in a region
	act        activity  // as of the last poll
	preempting bool      // offline pods are held for the online ones
	failing    bool      // NVML errors: failing open
	share      shares
	// The poll's NVML process samples (processSamples), read once per poll.
	samples    []nvml.ProcessUtilizationSample
	samplesAt  time.Time
	samplesErr error
}

// offline is an offline pod and how it is suspended.
type offline struct {
	uid, namespace, name string
	card                 CardID
	greedy               int64
	containers           []string          // granted (GPU) containers; sidecars are never touched
	ids                  map[string]string // container name → ID, from the pod's status
	deleting             bool              // deletion timestamp set: thawed, never frozen again
	capFor, breakFor     time.Duration     // freezer: longest single freeze, then the break
	noFreeze             bool              // a liveness probe tolerates no freeze
	regions              []*regionFile
	mech                 string // MechInterception when every container has a blockable region
	bypassed             bool   // computed through a block: the freezer from now on (bypass.go)
	podDir               string
	dirs                 map[string]string // container ID → its cgroup dir, once found
	frozenDirs           []string          // what the freezer froze
	frozen               string            // reason, "" when running
	frozenAt             time.Time
	breakUntil           time.Time // a capped freeze: not frozen again before
	logged               map[string]bool
}

func (p *offline) logOnce(ctx context.Context, key, msg string, kv ...any) {
	if p.logged == nil {
		p.logged = map[string]bool{}
	}
	if !p.logged[key] {
		p.logged[key] = true
		klog.FromContext(ctx).Info(msg, append([]any{"pod", klog.KRef(p.namespace, p.name)}, kv...)...)
	}
}

// refresh rebuilds the cards from the store: only online and offline grants
// count, general pods are never looked at. Offline pods that are gone are
// released and forgotten; pods being deleted are released.
func (c *Controller) refresh(ctx context.Context, now time.Time) error {
	grants, err := c.cfg.Grants()
	if err != nil {
		return err
	}
	pods := map[string]*v1.Pod{}
	if c.cfg.Pods != nil {
		list, err := c.cfg.Pods()
		if err != nil {
			return err
		}
		for _, p := range list {
			pods[string(p.UID)] = p
		}
	}
	c.lastGrants = now
	clear(c.pidPods)
	seen := map[string]bool{}
	onlineCtrs := map[string][]string{}
	for _, cd := range c.cards {
		cd.online, cd.offline = map[string]bool{}, cd.offline[:0]
	}
	for _, g := range grants {
		if (g.Class != protocol.ClassOnline && g.Class != protocol.ClassOffline) || len(g.Slices) == 0 {
			continue
		}
		cd := c.card(CardID{Index: g.Slices[0].Index, UUID: g.Slices[0].UUID})
		if g.Class == protocol.ClassOnline {
			cd.online[g.PodUID] = true
			onlineCtrs[g.PodUID] = appendOnce(onlineCtrs[g.PodUID], g.Container)
			continue
		}
		c.addOffline(ctx, cd, g, seen)
	}
	for uid, p := range c.pods {
		if !seen[uid] {
			c.release(ctx, p, "pod no longer holds an offline grant", now)
			closeRegions(p.regions)
			delete(c.pods, uid)
			continue
		}
		c.updateOffline(ctx, p, pods[uid])
	}
	c.refreshOnlineRegions(ctx, onlineCtrs)
	for _, cd := range c.cards {
		slices.Sort(cd.offline)
		cd.offline = slices.Compact(cd.offline)
	}
	return nil
}

func appendOnce(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

func (c *Controller) refreshOnlineRegions(ctx context.Context, ctrs map[string][]string) {
	for uid, files := range c.onlineRegions {
		if _, ok := ctrs[uid]; !ok {
			closeRegions(files)
			delete(c.onlineRegions, uid)
		}
	}
	for uid, names := range ctrs {
		files, ok, err := c.regionsOf(uid, names, c.onlineRegions[uid])
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Online pod's HAMi-core region refused; NVML decides its activity", "pod", uid, "err", err)
		}
		if !ok {
			closeRegions(files)
			files = nil
		}
		c.onlineRegions[uid] = files
	}
}

// updateOffline takes in what the pod's object says (containers, deletion,
// probes) and picks the mechanism.
func (c *Controller) updateOffline(ctx context.Context, p *offline, pod *v1.Pod) {
	p.ids = map[string]string{}
	if pod != nil {
		p.deleting = pod.DeletionTimestamp != nil
		for _, st := range pod.Status.ContainerStatuses {
			if slices.Contains(p.containers, st.Name) && st.ContainerID != "" {
				p.ids[st.Name] = st.ContainerID
			}
		}
	}
	var ok bool
	p.capFor, p.breakFor, ok = probeCap(pod, p.containers, c.cfg.MaxFreeze)
	p.noFreeze = !ok
	files, usable, err := c.regionsOf(p.uid, p.containers, p.regions)
	if err != nil {
		p.logOnce(ctx, "region:"+err.Error(), "HAMi-core region refused; the freezer suspends this pod", "err", err)
	}
	if usable {
		for _, r := range files {
			s, err := r.f.Read()
			switch {
			case err != nil || !s.HasSMLimit():
				usable = false // the library would not honour a block
			case !s.HostPIDsKnown():
				// A process without its host PID runs no rate limiter, so it
				// would launch through the block (hamiregion.HostPIDsKnown).
				usable = false
				p.logOnce(ctx, "hostpid:"+r.f.Path, "A process of the HAMi-core region has no host PID, so the library would not honour a block; the freezer suspends this pod", "path", r.f.Path)
			}
		}
	}
	mech := MechFreezer
	if usable && !p.bypassed {
		mech = MechInterception
	}
	if mech != p.mech && p.mech != "" && p.frozen != "" {
		// Switch mechanisms unsuspended: release with the old one first.
		c.release(ctx, p, "suspension mechanism changed to "+mech, c.now)
	}
	p.regions, p.mech = files, mech
}

func (c *Controller) card(id CardID) *card {
	cd, ok := c.cards[id.UUID]
	if !ok {
		cd = &card{id: id, online: map[string]bool{}}
		c.cards[id.UUID] = cd
	}
	return cd
}

func (c *Controller) addOffline(ctx context.Context, cd *card, g store.Grant, seen map[string]bool) {
	p, ok := c.pods[g.PodUID]
	if ok && p.card != cd.id {
		c.release(ctx, p, "grant moved to another card", c.now)
	}
	if !ok || p.card != cd.id {
		p = &offline{uid: g.PodUID, namespace: g.Namespace, name: g.Name, card: cd.id, dirs: map[string]string{}}
		c.pods[g.PodUID] = p
	}
	if !seen[g.PodUID] {
		p.greedy, p.containers = 0, nil
	}
	seen[g.PodUID] = true
	p.containers = appendOnce(p.containers, g.Container)
	if g.Resource == protocol.ResourceCoreGreedy {
		// A pod's containers each hold a slice of the same card: the pod's
		// share is their sum.
		for _, s := range g.Slices {
			p.greedy += s.Cores
		}
	}
	cd.offline = append(cd.offline, g.PodUID)
}

// recoverFrozen undoes what a previous agent left (it crashed or was
// SIGKILLed while holding offline pods): every frozen cgroup of an offline
// pod's (the pod's own and its containers') is thawed, every blocked
// region unblocked.
func (c *Controller) recoverFrozen(ctx context.Context) {
	for _, p := range c.pods {
		if c.locate(ctx, p) {
			left, err := c.cfg.Freezer.FrozenUnder(p.podDir)
			if err != nil {
				klog.FromContext(ctx).Error(err, "Looking for cgroups left frozen", "pod", klog.KRef(p.namespace, p.name))
			}
			for _, dir := range left {
				klog.FromContext(ctx).Info("Thawing a cgroup left frozen by a previous agent", "pod", klog.KRef(p.namespace, p.name), "dir", dir)
				if err := c.cfg.Freezer.Thaw(dir); err != nil {
					klog.FromContext(ctx).Error(err, "Thawing a leftover", "dir", dir)
				}
			}
		}
		if c.blockedAny(p) {
			klog.FromContext(ctx).Info("Unblocking an offline pod's launches left blocked by a previous agent", "pod", klog.KRef(p.namespace, p.name))
			if err := c.block(p, false); err != nil {
				klog.FromContext(ctx).Error(err, "Unblocking a leftover", "pod", klog.KRef(p.namespace, p.name))
			}
		}
	}
}

func (c *Controller) blockedAny(p *offline) bool {
	for _, r := range p.regions {
		if s, err := r.f.Read(); err == nil && s.RecentKernel < 0 {
			return true
		}
	}
	return false
}

// ThawAll releases every offline pod the controller holds (shutdown, panic).
func (c *Controller) ThawAll(ctx context.Context) {
	n := 0
	for _, p := range c.pods {
		if p.frozen != "" {
			c.release(ctx, p, "controller stopping", time.Now())
			n++
		}
		closeRegions(p.regions)
		p.regions = nil
	}
	for _, files := range c.onlineRegions {
		closeRegions(files)
	}
	klog.FromContext(ctx).Info("Priority controller stopped; offline pods released", "released", n)
}

// release lets p run now, whatever the reason it was held for.
func (c *Controller) release(ctx context.Context, p *offline, why string, now time.Time) {
	if p.frozen == "" {
		return
	}
	c.apply(ctx, c.card(p.card), p, "", now, now)
	klog.FromContext(ctx).V(4).Info("Released offline pod", "pod", klog.KRef(p.namespace, p.name), "why", why)
}

// FreezeBreaks counts the offline pods in a freeze cap's break at now (held
// by nothing, so that their liveness probes pass): the simulator's measure
// of how often the cap lets an offline pod run beside a busy online one.
func (c *Controller) FreezeBreaks(now time.Time) int {
	n := 0
	for _, p := range c.pods {
		if p.breakUntil.After(now) && p.frozen == "" {
			n++
		}
	}
	return n
}
