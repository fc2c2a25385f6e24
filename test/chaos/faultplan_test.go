package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
)

func TestListFaults(t *testing.T) {
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	span := time.Minute
	decisions := func(seed int64) []codes.Code {
		f := newListFaults(seed, 0.15, 1000)
		f.begin(start, span)
		var out []codes.Code
		for d := time.Duration(0); d < span; d += 10 * time.Millisecond {
			out = append(out, f.decide(start.Add(d)))
		}
		return out
	}
	t.Run("a seed replays its choices", func(t *testing.T) {
		if diff := cmp.Diff(decisions(7), decisions(7)); diff != "" {
			t.Errorf("two runs of seed 7 differ (-first +second):\n%s", diff)
		}
	})
	t.Run("storms refuse every call, outside them about the rate", func(t *testing.T) {
		f := newListFaults(3, 0.15, 100000)
		f.begin(start, span)
		if len(f.storms) < 5 {
			t.Fatalf("%d storms in a minute, want one every 3-6 s", len(f.storms))
		}
		refused, outside := 0, 0
		for d := time.Duration(0); d < span; d += time.Millisecond {
			now := start.Add(d)
			code := f.decide(now)
			if code != codes.OK && code != codes.ResourceExhausted && code != codes.Unavailable {
				t.Fatalf("decide(%v) = %v, want OK, ResourceExhausted or Unavailable", d, code)
			}
			if f.inStorm(now) {
				if code == codes.OK {
					t.Fatalf("a call at %v inside a storm passed", d)
				}
				continue
			}
			outside++
			if code != codes.OK {
				refused++
			}
		}
		if got := float64(refused) / float64(outside); got < 0.12 || got > 0.18 {
			t.Errorf("%.3f of the calls outside storms refused, want about 0.15", got)
		}
		for _, w := range f.storms {
			if l := w.to.Sub(w.from); l < 300*time.Millisecond || l > 1200*time.Millisecond {
				t.Errorf("a storm of %v, want 0.3-1.2 s", l)
			}
		}
	})
	t.Run("nothing before begin or after end, at most the limit", func(t *testing.T) {
		f := newListFaults(1, 1, 5)
		if got := f.decide(start); got != codes.OK {
			t.Errorf("before begin: %v, want OK", got)
		}
		f.begin(start, span)
		refused := 0
		for i := 0; i < 100; i++ {
			if f.decide(start.Add(time.Duration(i)*time.Millisecond)) != codes.OK {
				refused++
			}
		}
		if refused != 5 {
			t.Errorf("%d refusals with a limit of 5", refused)
		}
		f.end()
		f.limit = 1000
		if got := f.decide(start); got != codes.OK {
			t.Errorf("after end: %v, want OK", got)
		}
	})
}

func TestAllocFaults(t *testing.T) {
	f := newAllocFaults(11, 0.1, 40*time.Millisecond, 500)
	if _, cut := f.decide(); cut {
		t.Fatal("a call was cut before the faults were on")
	}
	f.set(true)
	cuts := 0
	for i := 0; i < 10000; i++ {
		d, cut := f.decide()
		if !cut {
			continue
		}
		cuts++
		if d < 0 || d > 40*time.Millisecond {
			t.Fatalf("cut after %v, want 0-40 ms", d)
		}
	}
	if cuts != 500 {
		t.Errorf("%d cuts, want the limit (500) of about 10000 × 0.1", cuts)
	}
	f.set(false)
	f.limit = 100000
	if _, cut := f.decide(); cut {
		t.Error("a call was cut after the faults were off")
	}
}

func TestPodOf(t *testing.T) {
	tests := []struct{ path, pod, sub string }{
		{"/api/v1/namespaces/chaos/pods/p-00012", "chaos/p-00012", ""},
		{"/api/v1/namespaces/chaos/pods/p-00012/binding", "chaos/p-00012", "binding"},
		{"/api/v1/namespaces/chaos/pods", "", ""},
		{"/api/v1/pods", "", ""},
		{"/api/v1/namespaces/chaos/configmaps/x", "", ""},
		{"/apis/coordination.k8s.io/v1/namespaces/qgpu-system/leases/qgpu-scheduler", "", ""},
	}
	for _, tc := range tests {
		pod, sub := podOf(tc.path)
		if pod != tc.pod || sub != tc.sub {
			t.Errorf("podOf(%q) = %q, %q; want %q, %q", tc.path, pod, sub, tc.pod, tc.sub)
		}
	}
}
