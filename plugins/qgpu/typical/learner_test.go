package typical

import (
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request"
)

func general(mem, cores int64) *request.Request {
	return &request.Request{Class: protocol.ClassGeneral,
		Containers: []request.Container{{Name: "c", MemoryGiB: mem, Cores: cores, Cards: 1}}}
}

// A cold learner has no workload; online, offline and node-exclusive pods
// leave it cold; a CPU-only pod is a shape (no cards); each of the first
// RelearnEvery pods is learned at once.
func TestLearnerStartsCold(t *testing.T) {
	l := NewLearner()
	if l.Load() != nil {
		t.Fatal("workload before any pod")
	}
	online := general(4, 0)
	online.Class = protocol.ClassOnline
	l.Observe(online, 4000)
	exclusive := general(0, 0)
	exclusive.NodeExclusive = true
	l.Observe(exclusive, 4000)
	if l.Load() != nil {
		t.Fatal("an online or node-exclusive pod made a workload")
	}
	l.Observe(&request.Request{Class: protocol.ClassGeneral}, 4000)
	if w := l.Load(); w == nil || w.Len() != 1 {
		t.Fatalf("after a CPU-only pod: %v, want one shape", w)
	}
	l.Observe(nil, 4000) // the same shape: a pod without qGPU requests
	l.Observe(general(4, 10), 4000)
	if w := l.Load(); w.Len() != 2 {
		t.Fatalf("after two shapes: %d shapes, want 2", w.Len())
	}
	l.Observe(general(8, 20), 4000)
	if w := l.Load(); w.Len() != 3 {
		t.Fatalf("after three shapes: %d shapes, want 3", w.Len())
	}
}

// ObservePod counts a pod once, whoever reports it and however often,
// until Forget drops it; Forget keeps its shape counted.
func TestLearnerObservePodOnce(t *testing.T) {
	l := NewLearner()
	if !l.ObservePod("a", nil, 1000) {
		t.Fatal("first report of pod a not counted")
	}
	if l.ObservePod("a", nil, 1000) || l.ObservePod("a", general(4, 10), 1000) {
		t.Fatal("pod a counted twice")
	}
	if !l.ObservePod("b", general(4, 10), 1000) {
		t.Fatal("pod b not counted")
	}
	if l.total != 2 {
		t.Fatalf("total %v, want 2", l.total)
	}
	l.Forget("a")
	if l.total != 2 || len(l.counted) != 1 {
		t.Fatalf("after Forget: total %v, %d pods remembered, want 2 and 1", l.total, len(l.counted))
	}
	if !l.ObservePod("a", nil, 1000) {
		t.Fatal("a new pod under a forgotten UID not counted")
	}
	online := general(4, 0)
	online.Class = protocol.ClassOnline
	if l.ObservePod("c", online, 1000) {
		t.Fatal("an online pod counted")
	}
}

// Past the first RelearnEvery pods the snapshot is rebuilt once every
// RelearnEvery pods, and shapes below the popularity threshold are left out.
func TestLearnerRelearnsEvery(t *testing.T) {
	l := NewLearner()
	for range RelearnEvery - 1 {
		l.Observe(general(4, 10), 4000) // the last of the pods learned at once
	}
	before := l.Load()
	for i := range RelearnEvery - 1 {
		l.Observe(general(8, 20), 4000)
		if l.Load() != before {
			t.Fatalf("snapshot rebuilt after %d more pods, want after %d", i+1, RelearnEvery)
		}
	}
	l.Observe(general(8, 20), 4000)
	if w := l.Load(); w == before || w.Len() != 2 {
		t.Fatalf("after %d more pods: %v shapes, want a new snapshot of 2", RelearnEvery, w.Len())
	}
	// A shape of one pod in 2·RelearnEvery+1 is under 5%: not typical.
	l2 := NewLearner()
	for range 2 * RelearnEvery {
		l2.Observe(general(4, 10), 4000)
	}
	l2.Observe(general(2, 5), 4000)
	for range RelearnEvery - 1 {
		l2.Observe(general(4, 10), 4000)
	}
	if w := l2.Load(); w.Len() != 1 {
		t.Fatalf("a rare shape is typical: %d shapes, want 1", w.Len())
	}
}

// Publish makes every pod counted so far part of the workload at once
// (the batch of bound pods counted at start), where counting alone
// republishes only every RelearnEvery pods; a cold learner stays cold.
func TestLearnerPublish(t *testing.T) {
	l := NewLearner()
	l.Publish()
	if l.Load() != nil {
		t.Fatal("Publish made a workload of no pods")
	}
	for range RelearnEvery {
		l.Observe(general(4, 10), 1000)
	}
	for range RelearnEvery / 2 {
		l.Observe(general(8, 20), 1000)
	}
	if w := l.Load(); w.Len() != 1 {
		t.Fatalf("%d shapes before Publish, want 1 (the second shape not yet due)", w.Len())
	}
	l.Publish()
	if w := l.Load(); w.Len() != 2 {
		t.Fatalf("%d shapes after Publish, want 2", w.Len())
	}
}

func TestCounted(t *testing.T) {
	l := NewLearner()
	if l.Counted("a") {
		t.Fatal("a counted before anything was observed")
	}
	l.ObservePod("a", nil, 1000)
	if !l.Counted("a") || l.Counted("b") {
		t.Errorf("counted a %v, b %v; want a only", l.Counted("a"), l.Counted("b"))
	}
}

// The learner counts at most maxCounted distinct shapes: a new one past
// them halves the counts until the rarest are dropped, and the heavy
// shapes stay.
func TestLearnerCountsBounded(t *testing.T) {
	l := NewLearner()
	for range 8 {
		l.Observe(general(16, 50), 1000)
	}
	for i := range 3 * maxCounted {
		l.Observe(nil, int64(2000+i)) // every pod a new CPU-only shape
		if n := len(l.counts); n > maxCounted {
			t.Fatalf("after %d shapes: %d counted, want at most %d", i+2, n, maxCounted)
		}
	}
	if _, ok := l.counts[shapeKey{memoryGiB: 16, cores: 50, cpu: 1000, cards: 1}]; !ok {
		t.Error("the shape counted 8 times was dropped for shapes counted once")
	}
	if _, ok := l.counts[shapeKey{cpu: int64(2000 + 3*maxCounted - 1)}]; !ok {
		t.Error("the newest shape is not counted")
	}
}
