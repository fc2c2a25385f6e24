package prioritysim

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/qgpu-scheduler/qgpu/agent/priority"
)

// TestCardSim: on a busy online pod (20 simulated seconds, NVML sampling
// every 1/6 s) neither mechanism lets the offline pods go while the online
// pod is busy, the per-poll model of before issue 17 does, and a seed
// gives the same figures twice. Suspension cannot beat the drain of the
// offline kernels already queued (4 × 20 ms shared with the online pod).
func TestCardSim(t *testing.T) {
	cs, err := CardSimDefaults("busy-online")
	if err != nil {
		t.Fatal(err)
	}
	cs.Duration = 20 * time.Second
	for _, tc := range []struct {
		mech      string
		model     priority.ActivityModel
		wantFlaps bool
	}{
		{priority.MechFreezer, priority.ActivitySamples, false},
		{priority.MechInterception, priority.ActivitySamples, false},
		{priority.MechFreezer, priority.ActivityPerPoll, true},
	} {
		t.Run(tc.mech+"/"+tc.model.String(), func(t *testing.T) {
			cs.Mechanism, cs.Activity = tc.mech, tc.model
			r, err := cs.Run(context.Background(), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", r)
			if (r.ThawsWhileBusy > 0) != tc.wantFlaps {
				t.Errorf("thaws while busy %d, want flapping %v", r.ThawsWhileBusy, tc.wantFlaps)
			}
			if tc.wantFlaps {
				return
			}
			if r.Episodes < 2 || len(r.Suspend) != r.Episodes || r.Missed != 0 {
				t.Errorf("busy phases %d, suspensions %d, missed %d", r.Episodes, len(r.Suspend), r.Missed)
			}
			if drain := 2 * cs.Kernel; Percentile(r.Suspend, 0) < drain {
				t.Errorf("suspended in %s, faster than the queued kernels can drain (%s)", Percentile(r.Suspend, 0), drain)
			}
			if Percentile(r.Resume, 0) < cs.IdleWindow {
				t.Errorf("resumed %s after the online pod stopped, before the idle window", Percentile(r.Resume, 0))
			}
			again, err := cs.Run(context.Background(), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(r, again); d != "" {
				t.Errorf("same seed, different run (-first +second):\n%s", d)
			}
		})
	}
}
