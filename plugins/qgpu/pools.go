package qgpu

import (
	"sort"
	"sync"

	"k8s.io/component-base/metrics"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/ledger"
)

var (
	poolLabels    = []string{"model"}
	poolCardsDesc = metrics.NewDesc("qgpu_scheduler_pool_cards",
		"Healthy qGPU cards, by model (a pool: the cards one model-filtered pod can take).", poolLabels, nil, metrics.ALPHA, "")
	poolEmptyCardsDesc = metrics.NewDesc("qgpu_scheduler_pool_empty_cards",
		"Healthy qGPU cards that no pod holds a slice of (what whole-card requests need), by model.", poolLabels, nil, metrics.ALPHA, "")
	poolMemoryCapacityDesc = metrics.NewDesc("qgpu_scheduler_pool_memory_capacity_bytes",
		"qgpu-memory of the healthy cards as the ledger counts it, in bytes, by model.", poolLabels, nil, metrics.ALPHA, "")
	poolMemoryUsedDesc = metrics.NewDesc("qgpu_scheduler_pool_memory_used_bytes",
		"qgpu-memory held on the healthy cards (assumed and bound pods), in bytes, by model.", poolLabels, nil, metrics.ALPHA, "")
	poolCoresUsedDesc = metrics.NewDesc("qgpu_scheduler_pool_cores_used_ratio",
		"Share of the healthy cards' compute held (qgpu-core of general pods plus qgpu-core-greedy of offline pods, over 100 per card), by model.", poolLabels, nil, metrics.ALPHA, "")
	poolFragmentationDesc = metrics.NewDesc("qgpu_scheduler_pool_fragmentation_ratio",
		"Share of the free qgpu-memory of the healthy cards that lies on cards some pod already holds a slice of (0 when nothing is free), by model.", poolLabels, nil, metrics.ALPHA, "")
)

// poolCollector computes the pool gauges from the ledgers of the process
// (one per informer factory: one in a scheduler, several in tests) when
// Prometheus scrapes: the scheduling path pays nothing for them.
type poolCollector struct {
	metrics.BaseStableCollector
	mu      sync.Mutex
	ledgers map[*ledger.Ledger]int
}

var _ metrics.StableCollector = (*poolCollector)(nil)

func newPoolCollector() *poolCollector {
	return &poolCollector{ledgers: map[*ledger.Ledger]int{}}
}

// add makes l's cards count; the returned func takes them out again.
func (c *poolCollector) add(l *ledger.Ledger) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ledgers[l]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.ledgers[l]--; c.ledgers[l] <= 0 {
			delete(c.ledgers, l)
		}
	}
}

// DescribeWithStability implements metrics.StableCollector.
func (c *poolCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	for _, d := range []*metrics.Desc{poolCardsDesc, poolEmptyCardsDesc, poolMemoryCapacityDesc, poolMemoryUsedDesc, poolCoresUsedDesc, poolFragmentationDesc} {
		ch <- d
	}
}

// CollectWithStability implements metrics.StableCollector.
func (c *poolCollector) CollectWithStability(ch chan<- metrics.Metric) {
	c.mu.Lock()
	ledgers := make([]*ledger.Ledger, 0, len(c.ledgers))
	for l := range c.ledgers {
		ledgers = append(ledgers, l)
	}
	c.mu.Unlock()
	pools := map[string]*pool{}
	for _, l := range ledgers {
		addPools(pools, l)
	}
	models := make([]string, 0, len(pools))
	for m := range pools {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		p := pools[m]
		gauge := func(d *metrics.Desc, v float64) {
			ch <- metrics.NewLazyConstMetric(d, metrics.GaugeValue, v, m)
		}
		gauge(poolCardsDesc, float64(p.cards))
		gauge(poolEmptyCardsDesc, float64(p.emptyCards))
		gauge(poolMemoryCapacityDesc, float64(p.memoryGiB)*bytesPerGiB)
		gauge(poolMemoryUsedDesc, float64(p.usedGiB)*bytesPerGiB)
		gauge(poolCoresUsedDesc, p.coresUsedRatio())
		gauge(poolFragmentationDesc, p.fragmentation())
	}
}

// bytesPerGiB converts the ledger's GiB to bytes (base units).
const bytesPerGiB = 1 << 30

// pool sums the healthy cards of one model.
type pool struct {
	cards, emptyCards int
	memoryGiB         int64
	usedGiB           int64
	usedCores         int64
	// strandedGiB is the free memory on cards that some pod holds.
	strandedGiB int64
}

// addPools adds the healthy cards of l's valid nodes to pools by model.
// Unhealthy cards and nodes without a valid inventory take no pods, so
// they are no capacity.
func addPools(pools map[string]*pool, l *ledger.Ledger) {
	l.Range(func(_ string, n ledger.Node) {
		if n.Invalid != "" {
			return
		}
		for i := range n.Cards {
			card := &n.Cards[i]
			if !card.Healthy {
				continue
			}
			p := pools[card.Model]
			if p == nil {
				p = &pool{}
				pools[card.Model] = p
			}
			p.cards++
			p.memoryGiB += card.MemoryGiB
			p.usedGiB += card.UsedMemoryGiB
			p.usedCores += card.UsedCores + card.UsedGreedy
			if card.Empty() {
				p.emptyCards++
			} else {
				p.strandedGiB += max(card.FreeMemoryGiB(), 0)
			}
		}
	})
}

func (p *pool) coresUsedRatio() float64 {
	if p.cards == 0 {
		return 0
	}
	return float64(p.usedCores) / float64(p.cards*protocol.CoresPerCard)
}

// fragmentation is the share of free memory on cards already in use: 0
// when every free GiB lies on empty cards (any request fits), 1 when none
// does (a whole-card request fits nowhere, and the free memory is split
// into what the cards' remaining slots and cores allow).
func (p *pool) fragmentation() float64 {
	free := p.memoryGiB - p.usedGiB
	if free <= 0 {
		return 0
	}
	return float64(p.strandedGiB) / float64(free)
}
