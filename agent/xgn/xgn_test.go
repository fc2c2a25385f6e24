package xgn

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func node(mode string, taints ...v1.Taint) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "7", Labels: map[string]string{}}, Spec: v1.NodeSpec{Taints: taints}}
	if mode != "" {
		n.Labels[LabelAllocMode] = mode
	}
	return n
}

func TestWant(t *testing.T) {
	other := v1.Taint{Key: "gpu", Value: "yes", Effect: v1.TaintEffectNoExecute}
	stale := v1.Taint{Key: TaintKey, Value: "false", Effect: v1.TaintEffectPreferNoSchedule}
	cases := []struct {
		name    string
		node    *v1.Node
		want    []v1.Taint
		changed bool
	}{
		{"xgn without taint", node(ModeXGN), []v1.Taint{Taint}, true},
		{"xgn with taint", node(ModeXGN, other, Taint), []v1.Taint{other, Taint}, false},
		{"xgn with a stale taint of the key", node(ModeXGN, stale, other), []v1.Taint{other, Taint}, true},
		{"xgn with the taint twice", node(ModeXGN, Taint, Taint), []v1.Taint{Taint}, true},
		{"sgn with taint", node("sgn", Taint, other), []v1.Taint{other}, true},
		{"unlabelled without taint", node("", other), []v1.Taint{other}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, changed := Want(c.node)
			if diff := cmp.Diff(c.want, got); diff != "" || changed != c.changed {
				t.Errorf("changed %v (want %v), taints (-want +got):\n%s", changed, c.changed, diff)
			}
		})
	}
}

func TestPatchGuardsResourceVersion(t *testing.T) {
	b, err := Patch(node(ModeXGN), []v1.Taint{Taint})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"resourceVersion":"7"},"spec":{"taints":[{"key":"sched.tensorstack.dev/xgn-mode","value":"true","effect":"NoSchedule"}]}}`
	if string(b) != want {
		t.Fatalf("patch %s, want %s", b, want)
	}
}

// Keep taints a node when it is labelled xgn and lifts the taint when the
// label goes.
func TestKeep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := node("")
	n.ResourceVersion = ""
	cs := fake.NewClientset(n)
	if err := Keep(ctx, cs, "n1"); err != nil {
		t.Fatal(err)
	}
	taints := func() []v1.Taint {
		cur, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cur.Spec.Taints
	}
	setMode := func(mode string) {
		cur, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Labels = map[string]string{LabelAllocMode: mode}
		if _, err := cs.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll := func(what string, cond func([]v1.Taint) bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(taints()); time.Sleep(25 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: taints %v after a minute", what, taints())
			}
		}
	}
	setMode(ModeXGN)
	poll("tainted", func(ts []v1.Taint) bool { return len(ts) == 1 && ts[0] == Taint })
	setMode("sgn")
	poll("untainted", func(ts []v1.Taint) bool { return len(ts) == 0 })
}
