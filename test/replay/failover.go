package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/placement"
	"github.com/qgpu-scheduler/qgpu/test/replay/sim"
)

// checkFailover refuses a failover the replay cannot model: one without a
// learner to replace (shapes from the trace, or a port of the simulator's
// policies, which always take them from the trace).
func checkFailover(f sim.Failover, t sim.Typical, policies []placement.Policy) error {
	if err := f.Validate(t); err != nil {
		return fmt.Errorf("--%w", err)
	}
	if f.Pct == 0 {
		return nil
	}
	for _, p := range policies {
		if sim.IsPort(p) {
			return fmt.Errorf("--failover-at: %s is a port of the simulator's policies, which takes its shapes from the trace", p)
		}
	}
	return nil
}

// printFailover compares, per policy, the figure of merit (merit: the
// allocation at 130% arrived, or with churn the steady allocation) of the
// same seeds (the same arrivals) with a failover and without, and ends
// with "failover diff X" for the last policy (the shipped default with
// --policy default or all), X the mean over seeds of with minus without.
func printFailover(w io.Writer, f sim.Failover, policies []placement.Policy, seeds []int64, without, with map[placement.Policy][]sim.Result) {
	reached := 0
	for _, r := range with[policies[len(policies)-1]] {
		if r.FailedOver >= 0 {
			reached++
		}
	}
	name := "allocation@130"
	if with[policies[0]][0].Steady != nil {
		name = "steady allocation"
	}
	fmt.Fprintf(w, "failover once %d%% of the GPU capacity is allocated, learner %s: reached in %d of %d seeds (%s)\n",
		f.Pct, f.Learner, reached, len(seeds), policies[len(policies)-1])
	fmt.Fprintf(w, "%-10s %29s %8s  %s\n", "policy", name+" without/with", "diff", "per seed")
	var diff float64
	for _, p := range policies {
		var per []string
		diff = 0
		for i := range seeds {
			d := merit(with[p][i]) - merit(without[p][i])
			diff += d
			per = append(per, fmt.Sprintf("%+.2f", d))
		}
		diff /= float64(len(seeds))
		a, b := summarizeBy(without[p], merit), summarizeBy(with[p], merit)
		fmt.Fprintf(w, "%-10s %29s %+8.2f  %s\n", p, fmt.Sprintf("%.2f / %.2f", a.mean, b.mean), diff, strings.Join(per, " "))
	}
	fmt.Fprintf(w, "failover diff %.2f\n", diff)
}
