package main

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// The fault proxies' random choices, apart from the proxies so that they
// can be tested without sockets. Every choice comes from one seeded source
// under a lock (a proxy serves calls concurrently) and every kind of fault
// is bounded in count.

// window is a span of time.
type window struct{ from, to time.Time }

func (w window) has(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

// listFaults decides for each PodResources call an agent makes whether
// the proxy answers it with a refusal instead of the kubelet's answer: at
// random with chance rate, and every call inside a storm, long enough
// that an agent's retries (about 0.6 s) can run out. It refuses nothing
// before begin and after end.
type listFaults struct {
	mu      sync.Mutex
	rng     *rand.Rand
	rate    float64
	on      bool
	storms  []window
	limit   int // refusals at most
	refused int
}

// refusals are the codes a kubelet's PodResources server answers a call it
// does not serve now: its rate limit (pkg/kubelet/apis/grpc/ratelimit.go)
// and a server that is going away or not listening yet.
var refusals = []codes.Code{codes.ResourceExhausted, codes.Unavailable}

func newListFaults(seed int64, rate float64, limit int) *listFaults {
	return &listFaults{rng: rand.New(rand.NewSource(seed)), rate: rate, limit: limit}
}

// begin turns the faults on and plans storms over span from start: one
// every 3-6 s, lasting 0.3-1.2 s.
func (f *listFaults) begin(start time.Time, span time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on, f.storms = true, nil
	for t := start.Add(jitter(f.rng, 2*time.Second, 3*time.Second)); t.Before(start.Add(span)); {
		end := t.Add(jitter(f.rng, 300*time.Millisecond, 900*time.Millisecond))
		f.storms = append(f.storms, window{t, end})
		t = end.Add(jitter(f.rng, 3*time.Second, 3*time.Second))
	}
}

func (f *listFaults) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = false
}

// jitter is a duration in [base, base+spread).
func jitter(r *rand.Rand, base, spread time.Duration) time.Duration {
	return base + time.Duration(r.Int63n(int64(spread)))
}

// decide returns codes.OK to pass the call on, else the refusal to answer.
func (f *listFaults) decide(now time.Time) codes.Code {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on || f.refused >= f.limit {
		return codes.OK
	}
	if !f.inStorm(now) && f.rng.Float64() >= f.rate {
		return codes.OK
	}
	f.refused++
	return refusals[f.rng.Intn(len(refusals))]
}

func (f *listFaults) inStorm(t time.Time) bool {
	return slices.ContainsFunc(f.storms, func(w window) bool { return w.has(t) })
}

// allocFaults decides for each Allocate call the kubelet makes whether the
// proxy cuts it: the call to the agent is cancelled after a delay of up
// to maxDelay (mid-call, or after the agent answered: then the answer is
// lost), and the kubelet gets an error, as when the connection between
// them breaks. It cuts nothing unless on.
type allocFaults struct {
	mu       sync.Mutex
	rng      *rand.Rand
	rate     float64
	maxDelay time.Duration
	on       bool
	limit    int
	cut      int
}

func newAllocFaults(seed int64, rate float64, maxDelay time.Duration, limit int) *allocFaults {
	return &allocFaults{rng: rand.New(rand.NewSource(seed)), rate: rate, maxDelay: maxDelay, limit: limit}
}

func (f *allocFaults) set(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = on
}

// decide returns whether to cut the call, and after how long.
func (f *allocFaults) decide() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.on || f.cut >= f.limit || f.rng.Float64() >= f.rate {
		return 0, false
	}
	f.cut++
	return time.Duration(f.rng.Int63n(int64(f.maxDelay) + 1)), true
}

// tally counts what the proxies and the side client did, by name.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (t *tally) add(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[name]++
}

func (t *tally) get(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[name]
}

// String lists the counts sorted by name: "a 3, b 1".
func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(t.n)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, t.n[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
