package quota

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Use is what a pod or a namespace holds, or what a pod asks for.
type Use struct {
	// Cores is in hundredths of a card: qgpu-core of general pods,
	// qgpu-core-greedy of offline pods, and a whole card (100) for each
	// card an online pod sits on, as an online pod takes the whole card's
	// compute when it is busy.
	Cores     int64
	MemoryGiB int64
}

func (u Use) add(o Use, sign int64) Use {
	return Use{Cores: u.Cores + sign*o.Cores, MemoryGiB: u.MemoryGiB + sign*o.MemoryGiB}
}

// SliceUse is what one held slice counts: the card model it sits on.
type SliceUse struct {
	Model string
	Use
}

// HoldingUse turns a pod's slices into what they count against quota.
// models[i] is the model of the card of slices[i].
func HoldingUse(class protocol.Class, slices []protocol.Slice, models []string) []SliceUse {
	out := make([]SliceUse, 0, len(slices))
	seen := map[int]bool{}
	for i, s := range slices {
		u := SliceUse{Model: models[i], Use: Use{MemoryGiB: s.MemoryGiB, Cores: s.Cores}}
		if class == protocol.ClassOnline {
			u.Cores = 0
			if !seen[s.Index] {
				u.Cores = protocol.CoresPerCard
			}
			seen[s.Index] = true
		}
		out = append(out, u)
	}
	return out
}

// Exceeded is one limit a pod would break.
type Exceeded struct {
	Namespace string
	Limit     Limit
	// Resource is "cards" or "memoryGiB".
	Resource string
	// Used, Asked and Max are in the resource's unit (hundredths of a card
	// for cards).
	Used, Asked, Max int64
	// Invalid is set, with Limit AnyModel, for a namespace whose entry was
	// refused and that has no earlier valid limits: closed until fixed.
	Invalid error
}

// Error is the reason a pod stays Pending: it names the namespace, the
// model, what is used, what the pod asks and the limit.
func (e Exceeded) Error() string {
	if e.Invalid != nil {
		return fmt.Sprintf("namespace %q has no valid qGPU quota (its entry was refused and no earlier valid one is known): %v", e.Namespace, e.Invalid)
	}
	if e.Resource == "cards" {
		return fmt.Sprintf("namespace %q is over its qGPU quota for model %q: cards used %s + asked %s > limit %s",
			e.Namespace, e.Limit.Model, FormatCards(e.Used), FormatCards(e.Asked), FormatCards(e.Max))
	}
	return fmt.Sprintf("namespace %q is over its qGPU quota for model %q: memoryGiB used %d + asked %d > limit %d",
		e.Namespace, e.Limit.Model, e.Used, e.Asked, e.Max)
}

type held struct {
	namespace string
	uses      []SliceUse
}

// Tally is the limits and what every namespace holds. The ledger tells it
// of every holding it records or drops (Held, Released), in the order it
// changes its own holdings, so the tally never counts a pod the ledger does
// not. It is safe for concurrent use; its lock is a leaf (it never calls
// out while holding it).
type Tally struct {
	mu      sync.RWMutex
	specs   map[string]Spec
	invalid map[string]error
	holders map[types.UID]held
	// used is per namespace, per exact card model.
	used map[string]map[string]Use
}

// NewTally returns an empty tally: no limits, nothing held.
func NewTally() *Tally {
	return &Tally{specs: map[string]Spec{}, invalid: map[string]error{}, holders: map[types.UID]held{}, used: map[string]map[string]Use{}}
}

// Held records what the pod holds now, replacing what it held before.
func (t *Tally) Held(uid types.UID, namespace string, uses []SliceUse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releaseLocked(uid)
	t.holders[uid] = held{namespace: namespace, uses: uses}
	byModel := t.used[namespace]
	if byModel == nil {
		byModel = map[string]Use{}
		t.used[namespace] = byModel
	}
	for _, u := range uses {
		byModel[u.Model] = byModel[u.Model].add(u.Use, 1)
	}
}

// Released forgets what the pod held; it is idempotent.
func (t *Tally) Released(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releaseLocked(uid)
}

func (t *Tally) releaseLocked(uid types.UID) {
	h, ok := t.holders[uid]
	if !ok {
		return
	}
	delete(t.holders, uid)
	byModel := t.used[h.namespace]
	for _, u := range h.uses {
		left := byModel[u.Model].add(u.Use, -1)
		if left == (Use{}) {
			delete(byModel, u.Model)
		} else {
			byModel[u.Model] = left
		}
	}
	if len(byModel) == 0 {
		delete(t.used, h.namespace)
	}
}

// SetConfigMap takes the limits of the ConfigMap (nil: deleted). A
// namespace whose entry is broken keeps its last valid limits; a namespace
// whose entry is gone has none. errs are kept for Rows. It reports whether
// any namespace's limits changed.
func (t *Tally) SetConfigMap(specs map[string]Spec, errs map[string]error) (changed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := make(map[string]Spec, len(specs))
	for ns, spec := range specs {
		next[ns] = spec
	}
	for ns := range errs {
		if _, valid := next[ns]; valid {
			continue
		}
		if old, ok := t.specs[ns]; ok {
			next[ns] = old
		}
	}
	changed = !maps.EqualFunc(t.specs, next, slices.Equal[Spec])
	t.specs, t.invalid = next, maps.Clone(errs)
	return changed
}

// Limited reports whether the namespace has any limit.
func (t *Tally) Limited(namespace string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.specs[namespace]) > 0 || t.invalid[namespace] != nil
}

// closedLocked is the refusal of a namespace whose entry is invalid and
// that has no earlier valid limits (after a restart, or a first entry with
// a typo): a quota fails closed, as its author meant to limit the
// namespace. nil otherwise. The caller holds t.mu.
func (t *Tally) closedLocked(namespace string) []Exceeded {
	err := t.invalid[namespace]
	if err == nil || len(t.specs[namespace]) > 0 {
		return nil
	}
	return []Exceeded{{Namespace: namespace, Limit: Limit{Model: AnyModel}, Resource: "invalid", Invalid: err}}
}

// Check returns the limits of the namespace that ask would break on a card
// of any model the limit matches, in the order of the spec: the check
// before the cards are chosen, when the model is not known yet.
func (t *Tally) Check(namespace string, ask Use) []Exceeded {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if closed := t.closedLocked(namespace); closed != nil {
		return closed
	}
	var out []Exceeded
	for _, l := range t.specs[namespace] {
		out = append(out, t.exceeds(namespace, l, ask)...)
	}
	return out
}

// CheckSlices returns the limits that the slices, on the models named,
// would break: each limit counts only the slices on matching cards.
func (t *Tally) CheckSlices(namespace string, uses []SliceUse) []Exceeded {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if closed := t.closedLocked(namespace); closed != nil {
		return closed
	}
	var out []Exceeded
	for _, l := range t.specs[namespace] {
		var ask Use
		for _, u := range uses {
			if l.Matches(u.Model) {
				ask = ask.add(u.Use, 1)
			}
		}
		if ask != (Use{}) {
			out = append(out, t.exceeds(namespace, l, ask)...)
		}
	}
	return out
}

// exceeds compares one limit with what is used plus ask; the caller holds t.mu.
func (t *Tally) exceeds(namespace string, l Limit, ask Use) []Exceeded {
	used := t.usedLocked(namespace, l)
	var out []Exceeded
	if l.Cores != Unlimited && ask.Cores > 0 && used.Cores+ask.Cores > l.Cores {
		out = append(out, Exceeded{Namespace: namespace, Limit: l, Resource: "cards", Used: used.Cores, Asked: ask.Cores, Max: l.Cores})
	}
	if l.MemoryGiB != Unlimited && ask.MemoryGiB > 0 && used.MemoryGiB+ask.MemoryGiB > l.MemoryGiB {
		out = append(out, Exceeded{Namespace: namespace, Limit: l, Resource: "memoryGiB", Used: used.MemoryGiB, Asked: ask.MemoryGiB, Max: l.MemoryGiB})
	}
	return out
}

func (t *Tally) usedLocked(namespace string, l Limit) Use {
	var sum Use
	for model, u := range t.used[namespace] {
		if l.Matches(model) {
			sum = sum.add(u, 1)
		}
	}
	return sum
}

// Row is one limit with its use, for kubectl qgpu quota and the docs.
type Row struct {
	Namespace string
	Limit     Limit
	Used      Use
}

// Rows lists every limit with what its namespace uses against it, sorted
// by namespace and model, and the namespaces whose entry is broken.
func (t *Tally) Rows() ([]Row, map[string]error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var rows []Row
	for ns, spec := range t.specs {
		for _, l := range spec {
			rows = append(rows, Row{Namespace: ns, Limit: l, Used: t.usedLocked(ns, l)})
		}
	}
	sortRows(rows)
	return rows, maps.Clone(t.invalid)
}

func sortRows(rows []Row) {
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Limit.Model < rows[j].Limit.Model
	})
}

// Ask is what a request counts against quota wherever it is placed.
func Ask(req *request.Request) Use {
	var u Use
	for _, c := range req.Containers {
		u.MemoryGiB += c.MemoryGiB
		if req.Class != protocol.ClassOnline {
			u.Cores += c.Cores
		}
	}
	if req.Class == protocol.ClassOnline && len(req.Containers) > 0 {
		u.Cores = protocol.CoresPerCard // an online pod sits on one card
	}
	return u
}

// Feed is the tally as the ledger's Watcher.
type Feed struct{ Tally *Tally }

var _ ledger.Watcher = Feed{}

// Held implements ledger.Watcher.
func (f Feed) Held(uid types.UID, h ledger.Holding, models []string) {
	f.Tally.Held(uid, h.Namespace, HoldingUse(h.Class, h.Slices, models))
}

// Released implements ledger.Watcher.
func (f Feed) Released(uid types.UID) { f.Tally.Released(uid) }
