package main

import (
	"fmt"
	"strings"

	"k8s.io/component-base/metrics/legacyregistry"
)

// schedulerCounts is what kube-scheduler (in this process, its metrics in
// the legacy registry) reports for one profile: scheduling attempts by
// result (scheduler_schedule_attempts_total), and seconds spent per
// extension point (scheduler_framework_extension_point_duration_seconds'
// sums).
type schedulerCounts struct {
	attempts map[string]float64
	seconds  map[string]float64
}

func readCounts(profile string) schedulerCounts {
	c := schedulerCounts{attempts: map[string]float64{}, seconds: map[string]float64{}}
	fams, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return c
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["profile"] != profile {
				continue
			}
			switch f.GetName() {
			case "scheduler_schedule_attempts_total":
				c.attempts[labels["result"]] += m.GetCounter().GetValue()
			case "scheduler_framework_extension_point_duration_seconds":
				c.seconds[labels["extension_point"]] += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return c
}

// cyclePoints are the scheduling cycle's extension points, in order; the
// cycle runs one pod at a time, so their time per attempt bounds the rate.
var cyclePoints = []string{"PreFilter", "Filter", "PostFilter", "PreScore", "Score", "Reserve", "Permit"}

// since formats what a phase cost the scheduler: attempts beyond one per
// pod (retries of pods that fit nowhere yet, errors), and the scheduling
// cycle's milliseconds per attempt at each extension point.
func (c schedulerCounts) since(before schedulerCounts) string {
	var parts []string
	tried := 0.0
	for _, r := range []string{"scheduled", "unschedulable", "error"} {
		if d := c.attempts[r] - before.attempts[r]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", r, d))
			tried += d
		}
	}
	if tried == 0 {
		return "none"
	}
	var points []string
	total := 0.0
	for _, p := range cyclePoints {
		ms := 1000 * (c.seconds[p] - before.seconds[p]) / tried
		total += ms
		if ms >= 0.005 {
			points = append(points, fmt.Sprintf("%s %.2f", p, ms))
		}
	}
	return fmt.Sprintf("%s; ms per attempt %.2f (%s)", strings.Join(parts, ", "), total, strings.Join(points, ", "))
}
