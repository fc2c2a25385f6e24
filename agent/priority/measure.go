package priority

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Measurement is what Measure saw, end to end through the files: Suspend
// from the online process turning busy (scripted in the fake NVML) to both
// offline cgroups reading frozen; Resume from it turning idle to both reading
// thawed. FrozenWhileIdle counts samples, taken every millisecond during
// the idle phases once the offline pods had resumed, that found an offline
// pod frozen; GeneralTouched is whether the general pod's freeze file changed.
type Measurement struct {
	Suspend, Resume []time.Duration
	FrozenWhileIdle int
	GeneralTouched  bool
}

// Measure runs cycles of busy (busyFor) and idle (idleFor) on the online
// process of s while a controller runs with cfg, and records the latencies.
func Measure(ctx context.Context, s *Sim, cfg Config, cycles int, busyFor, idleFor time.Duration) (Measurement, error) {
	var m Measurement
	ctrl, err := New(cfg)
	if err != nil {
		return m, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	limit := cfg.Poll + cfg.Idle + time.Second // far beyond any promise: only to end a broken run
	for range cycles {
		m.FrozenWhileIdle += s.idleSamples(idleFor)
		// A random phase against the controller's ticks: otherwise every
		// change would land just after a tick and measure the worst case.
		time.Sleep(rand.N(cfg.Poll))
		s.SetOnlineBusy(true)
		t0 := time.Now()
		t1, err := s.WaitFrozen(ctx, true, limit)
		if err != nil {
			return m, err
		}
		m.Suspend = append(m.Suspend, t1.Sub(t0))
		time.Sleep(busyFor + rand.N(cfg.Poll))
		s.SetOnlineBusy(false)
		t2 := time.Now()
		t3, err := s.WaitFrozen(ctx, false, limit)
		if err != nil {
			return m, err
		}
		m.Resume = append(m.Resume, t3.Sub(t2))
	}
	m.GeneralTouched = s.Frozen(SimGeneral) || s.generalWritten()
	return m, nil
}

func (s *Sim) idleSamples(d time.Duration) int {
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if s.Frozen(SimOffline1) || s.Frozen(SimOffline2) {
			n++
		}
	}
	return n
}

// Percentile returns the q-quantile (0..1) of ds, nearest rank.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Summary formats min/p50/p90/p99/max of ds in milliseconds.
func Summary(ds []time.Duration) string {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return fmt.Sprintf("n=%d min=%.2fms p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms", len(ds),
		ms(Percentile(ds, 0)), ms(Percentile(ds, 0.5)), ms(Percentile(ds, 0.9)), ms(Percentile(ds, 0.99)), ms(Percentile(ds, 1)))
}
