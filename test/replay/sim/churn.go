package sim

import (
	"container/heap"
	"fmt"
	"math/rand"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

// Churn replaces the paper's protocol (pods arrive up to 130 % of capacity
// and never leave) by a live cluster's: pods drawn at random from the
// trace arrive as a Poisson process and leave after exponentially
// distributed lifetimes, and the run is measured in steady state. Time is
// counted in mean lifetimes: with Poisson arrivals and exponential
// lifetimes only the offered load and the spans, in lifetimes, matter.
type Churn struct {
	// Load is the offered GPU load: the arrival rate times the mean
	// lifetime times the mean GPU demand of a trace pod, over the
	// cluster's GPU capacity (1: as much GPU demand as capacity, on
	// average). 0 is the paper's protocol.
	Load float64
	// Warmup is the span, in mean lifetimes, before the measurement
	// starts; Window is the span measured.
	Warmup, Window float64
}

// On reports whether the replay has departures.
func (c Churn) On() bool { return c.Load != 0 }

// Validate names the first field out of range.
func (c Churn) Validate() error {
	switch {
	case !c.On():
		return nil
	case !(c.Load > 0 && c.Load <= 10):
		return fmt.Errorf("churn-load %v: want an offered load above 0, at most 10", c.Load)
	case !(c.Warmup >= 0 && c.Warmup <= 100):
		return fmt.Errorf("churn-warmup %v: want 0 to 100 mean lifetimes", c.Warmup)
	case !(c.Window > 0 && c.Window <= 100):
		return fmt.Errorf("churn-window %v: want above 0, at most 100 mean lifetimes", c.Window)
	}
	return nil
}

// arrival is one pod of a churn replay: the trace pod, its arrival time
// and its lifetime, in mean lifetimes.
type arrival struct {
	pod      int
	at, life float64
}

// churnArrivals draws a churn replay's pods from rng. The cluster starts
// in the steady state it would reach with room for every pod (an M/M/∞
// queue's): a Poisson number of pods of mean rate×1, all arrived at time
// 0, each with an exponential remaining lifetime (exponential lifetimes
// are memoryless); then arrivals follow at exponential gaps of mean
// 1/rate until Warmup+Window, each with an exponential lifetime of mean 1.
// Each pod is drawn uniformly, with replacement, from the trace. rate is
// Load × capacity over the trace's mean GPU demand per pod.
func churnArrivals(pods []Pod, capacity int64, c Churn, rng *rand.Rand) []arrival {
	var demand int64
	for i := range pods {
		demand += pods[i].GPUDemand()
	}
	if len(pods) == 0 || demand == 0 {
		return nil
	}
	rate := c.Load * float64(capacity) * float64(len(pods)) / float64(demand)
	end := c.Warmup + c.Window
	var out []arrival
	// The steady state's population: the arrivals of a rate-λ Poisson
	// process over one mean lifetime, counted.
	for t := rng.ExpFloat64() / rate; t < 1; t += rng.ExpFloat64() / rate {
		out = append(out, arrival{pod: rng.Intn(len(pods)), life: rng.ExpFloat64()})
	}
	for t := rng.ExpFloat64() / rate; t < end; t += rng.ExpFloat64() / rate {
		out = append(out, arrival{pod: rng.Intn(len(pods)), at: t, life: rng.ExpFloat64()})
	}
	return out
}

// Steady is what a churn replay measures over its window: the
// time-average share of GPU capacity allocated, and the share of the GPU
// demand that arrived in the window and found no room, both in %.
type Steady struct {
	Alloc, Rejected float64
}

// departure is a placed pod's end: when, and what it gives back.
type departure struct {
	at   float64
	hold holding
	gpu  int64
}

type departures []departure

func (d departures) Len() int           { return len(d) }
func (d departures) Less(i, j int) bool { return d[i].at < d[j].at }
func (d departures) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *departures) Push(x any)        { *d = append(*d, x.(departure)) }
func (d *departures) Pop() any {
	old := *d
	x := old[len(old)-1]
	*d = old[:len(old)-1]
	return x
}

// steadyMeter integrates the allocation over the window and sums the
// window's offered and rejected GPU demand.
type steadyMeter struct {
	from, to         float64
	clock, area      float64
	offered, refused int64
}

// advance integrates allocated (GPU-milli) from the meter's clock to t.
func (m *steadyMeter) advance(t float64, allocated int64) {
	if lo, hi := max(m.clock, m.from), min(t, m.to); hi > lo {
		m.area += float64(allocated) * (hi - lo)
	}
	m.clock = t
}

func (m *steadyMeter) arrived(at float64, gpu int64, placed bool) {
	if at < m.from {
		return
	}
	m.offered += gpu
	if !placed {
		m.refused += gpu
	}
}

func (m *steadyMeter) steady(capacity int64) Steady {
	st := Steady{Alloc: m.area * 100 / (m.to - m.from) / float64(capacity)}
	if m.offered > 0 {
		st.Rejected = float64(m.refused) * 100 / float64(m.offered)
	}
	return st
}

// replayChurn feeds the arrivals to the selector in time order, gives
// back what each placed pod holds when its lifetime ends, and measures
// the window.
func replayChurn(cfg Config, s *selector, reqs []*request.Request, arrivals []arrival, capacity int64) Result {
	res := Result{FailedOver: -1}
	m := &steadyMeter{from: cfg.Churn.Warmup, to: cfg.Churn.Warmup + cfg.Churn.Window}
	var allocated int64
	var leaving departures
	leave := func(until float64) {
		for len(leaving) > 0 && leaving[0].at <= until {
			d := heap.Pop(&leaving).(departure)
			m.advance(d.at, allocated)
			s.release(d.hold)
			allocated -= d.gpu
		}
	}
	for i, a := range arrivals {
		leave(a.at)
		m.advance(a.at, allocated)
		pod := &cfg.Pods[a.pod]
		hold, ok := s.placeHolding(pod, reqs[a.pod])
		m.arrived(a.at, pod.GPUDemand(), ok)
		if !ok {
			res.Failed++
			if reqs[a.pod].Class != protocol.ClassGeneral {
				res.ClassFailed++
			}
			continue
		}
		res.Placed++
		allocated += pod.GPUDemand()
		heap.Push(&leaving, departure{at: a.at + a.life, hold: hold, gpu: pod.GPUDemand()})
		if s.learner != nil && res.FailedOver < 0 && cfg.Failover.due(allocated, capacity) {
			s.failover(cfg.Failover.Learner)
			res.FailedOver = i
		}
	}
	leave(m.to)
	m.advance(m.to, allocated)
	st := m.steady(capacity)
	res.Steady = &st
	return res
}
