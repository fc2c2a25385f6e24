package priority

import (
	"context"
	"errors"
	"os"
	"slices"
	"time"

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
	lastSample uint64          // newest NVML sample timestamp seen (µs)
	preempting bool            // offline pods are held frozen for the online ones
	idleSince  time.Time       // the first poll that saw the online pods idle after busy
	failing    bool            // NVML errors: failing open
	share      shares
}

// offline is an offline pod and its freezer state.
type offline struct {
	uid, namespace, name string
	card                 CardID
	greedy               int64
	dir                  string // cgroup directory, "" until found
	frozen               string // reason, "" when running
	frozenAt             time.Time
	writeFailed          bool // the last freezer write failed (logged once)
	missingLogged        bool // its cgroup was not found (logged once)
}

// refresh rebuilds the cards from the store: only online and offline grants
// count, general pods are never looked at. Offline pods that are gone are
// thawed (if their cgroup is still there) and forgotten.
func (c *Controller) refresh(ctx context.Context, now time.Time) error {
	grants, err := c.cfg.Grants()
	if err != nil {
		return err
	}
	c.lastGrants = now
	clear(c.pidPods)
	seen := map[string]bool{}
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
			continue
		}
		c.addOffline(ctx, cd, g, seen)
	}
	for uid, p := range c.pods {
		if !seen[uid] {
			c.release(ctx, p, "pod no longer holds an offline grant")
			delete(c.pods, uid)
			delete(c.events, uid)
		}
	}
	for _, cd := range c.cards {
		slices.Sort(cd.offline)
		cd.offline = slices.Compact(cd.offline)
	}
	return nil
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
		c.release(ctx, p, "grant moved to another card")
	}
	if !ok || p.card != cd.id {
		p = &offline{uid: g.PodUID, namespace: g.Namespace, name: g.Name, card: cd.id}
		c.pods[g.PodUID] = p
	}
	if !seen[g.PodUID] {
		p.greedy = 0
	}
	seen[g.PodUID] = true
	if g.Resource == protocol.ResourceCoreGreedy {
		// A pod's containers each hold a slice of the same card: the pod's
		// share is their sum.
		for _, s := range g.Slices {
			p.greedy += s.Cores
		}
	}
	cd.offline = append(cd.offline, g.PodUID)
}

// recoverFrozen thaws offline pods that are frozen at start: a previous agent
// crashed (or was killed) while holding them.
func (c *Controller) recoverFrozen(ctx context.Context) {
	for _, p := range c.pods {
		if !c.locate(ctx, p) {
			continue
		}
		if frozen, err := c.cfg.Freezer.Frozen(p.dir); err == nil && frozen {
			klog.FromContext(ctx).Info("Thawing an offline pod left frozen by a previous agent", "pod", klog.KRef(p.namespace, p.name))
			p.frozen = "recovered"
			c.release(ctx, p, "left frozen by a previous agent")
		}
	}
}

// thawAll thaws every offline pod the controller has frozen (shutdown, panic).
func (c *Controller) thawAll(ctx context.Context) {
	n := 0
	for _, p := range c.pods {
		if p.frozen != "" {
			c.release(ctx, p, "controller stopping")
			n++
		}
	}
	klog.FromContext(ctx).Info("Priority controller stopped; offline pods thawed", "thawed", n)
}

// release thaws p now, whatever the reason it was frozen for.
func (c *Controller) release(ctx context.Context, p *offline, why string) {
	if p.frozen == "" {
		return
	}
	cd := c.card(p.card)
	c.apply(ctx, cd, p, "", time.Now())
	klog.FromContext(ctx).V(4).Info("Released offline pod", "pod", klog.KRef(p.namespace, p.name), "why", why)
}

// locate finds p's cgroup directory once; false when it has none (yet).
func (c *Controller) locate(ctx context.Context, p *offline) bool {
	if p.dir != "" {
		return true
	}
	dir, err := c.cfg.Freezer.PodDir(p.uid)
	if err != nil {
		if !p.missingLogged {
			// Expected for a moment while the pod starts; for good, the agent
			// does not see the host's cgroups (mount /sys/fs/cgroup, see README).
			klog.FromContext(ctx).Info("Offline pod has no cgroup yet; it cannot be frozen", "pod", klog.KRef(p.namespace, p.name), "err", err)
			p.missingLogged = true
		}
		return false
	}
	p.dir = dir
	return true
}

// apply freezes (want != "") or thaws (want == "") p if it is not so already,
// and reports the change. start is when the poll that decided it began.
func (c *Controller) apply(ctx context.Context, cd *card, p *offline, want string, start time.Time) {
	if p == nil {
		return
	}
	was := p.frozen == ReasonOnlineBusy
	c.write(ctx, cd, p, want, start)
	if is := p.frozen == ReasonOnlineBusy; is != was && c.cfg.Reporter != nil {
		c.cfg.Reporter.PodSuspended(PodRef{UID: p.uid, Namespace: p.namespace, Name: p.name, Card: p.card}, is, time.Now())
	}
}

// write is apply without the report.
func (c *Controller) write(ctx context.Context, cd *card, p *offline, want string, start time.Time) {
	if !c.locate(ctx, p) {
		return
	}
	if (p.frozen == "") == (want == "") {
		p.frozen = want // same state; the reason may change (online-busy → time-slice)
		return
	}
	var err error
	if want != "" {
		err = c.cfg.Freezer.Freeze(p.dir)
	} else {
		err = c.cfg.Freezer.Thaw(p.dir)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// The pod's cgroup went away (pod deleted or restarted): look it up again.
			p.dir, p.frozen = "", ""
			return
		}
		if !p.writeFailed {
			klog.FromContext(ctx).Error(err, "Freezer write failed; retrying every poll", "pod", klog.KRef(p.namespace, p.name), "freeze", want != "")
		}
		p.writeFailed = true
		return
	}
	p.writeFailed = false
	now := time.Now()
	if want != "" {
		c.suspended(cd, p, want, now.Sub(start), now)
	} else {
		c.resumed(cd, p, now)
	}
	p.frozen = want
	c.cfg.Observer.FrozenPods(cd.id, c.frozenOn(cd))
}

func (c *Controller) frozenOn(cd *card) int {
	n := 0
	for _, p := range c.pods {
		if p.card == cd.id && p.frozen != "" {
			n++
		}
	}
	return n
}
