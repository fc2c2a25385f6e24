package cardhealth

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 = time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
)

func card(i int, healthy bool) protocol.Card {
	return protocol.Card{Index: i, UUID: "GPU-" + string(rune('a'+i)), Healthy: healthy, MemoryMiB: 15360}
}

func podWith(conds ...v1.PodCondition) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "uid-p"},
		Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: conds}}
}

func why(string) string { return "NVML reported critical Xid 79" }

func TestDesired(t *testing.T) {
	sick := v1.PodCondition{Type: ConditionType, Status: v1.ConditionFalse, Reason: ReasonUnhealthy,
		Message:            "unhealthy: card 1 (GPU-b): NVML reported critical Xid 79 (the card takes no new pod or claim; this pod's work on it may fail)",
		LastTransitionTime: t0}
	well := v1.PodCondition{Type: ConditionType, Status: v1.ConditionTrue, Reason: ReasonHealthy,
		Message: "healthy: card 1 (GPU-b)", LastTransitionTime: t0}
	for _, tc := range []struct {
		name  string
		pod   *v1.Pod
		cards []protocol.Card
		want  *v1.PodCondition
	}{
		{name: "healthy, never sick: nothing written", pod: podWith(), cards: []protocol.Card{card(1, true)}},
		{name: "no cards", pod: podWith(), cards: nil},
		{name: "goes unhealthy", pod: podWith(), cards: []protocol.Card{card(1, false)},
			want: &v1.PodCondition{Type: ConditionType, Status: v1.ConditionFalse, Reason: ReasonUnhealthy,
				Message: sick.Message, LastTransitionTime: metav1.NewTime(t1)}},
		{name: "still unhealthy: nothing written", pod: podWith(sick), cards: []protocol.Card{card(1, false)}},
		{name: "healthy again", pod: podWith(sick), cards: []protocol.Card{card(1, true)},
			want: &v1.PodCondition{Type: ConditionType, Status: v1.ConditionTrue, Reason: ReasonHealthy,
				Message: "healthy: card 1 (GPU-b)", LastTransitionTime: metav1.NewTime(t1)}},
		{name: "still healthy: nothing written", pod: podWith(well), cards: []protocol.Card{card(1, true)}},
		{name: "a second card fails: message changes, transition time kept", pod: podWith(sick),
			cards: []protocol.Card{card(0, false), card(1, false)},
			want: &v1.PodCondition{Type: ConditionType, Status: v1.ConditionFalse, Reason: ReasonUnhealthy,
				Message: "unhealthy: card 0 (GPU-a): NVML reported critical Xid 79; card 1 (GPU-b): NVML reported critical Xid 79 " +
					"(the card takes no new pod or claim; this pod's work on it may fail)", LastTransitionTime: t0}},
		{name: "one of two cards unhealthy", pod: podWith(), cards: []protocol.Card{card(0, true), card(1, false)},
			want: &v1.PodCondition{Type: ConditionType, Status: v1.ConditionFalse, Reason: ReasonUnhealthy,
				Message: sick.Message, LastTransitionTime: metav1.NewTime(t1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Desired(tc.pod, tc.cards, why, t1)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Desired (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSync: the pods holding a slice of the unhealthy card get the
// condition through the API; a pod on another card, a pod without a
// grant and a finished pod do not; the card's recovery turns it True.
func TestSync(t *testing.T) {
	pod := func(name string, phase v1.PodPhase) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Spec: v1.PodSpec{NodeName: "n"}, Status: v1.PodStatus{Phase: phase}}
	}
	pods := []*v1.Pod{pod("on-sick", v1.PodRunning), pod("on-well", v1.PodRunning), pod("no-grant", v1.PodRunning), pod("done", v1.PodSucceeded)}
	var objs []runtime.Object
	for _, p := range pods {
		objs = append(objs, p)
	}
	cs := fake.NewClientset(objs...)
	grant := func(pod string, c protocol.Card) store.Grant {
		return store.Grant{PodUID: "uid-" + pod, Slices: []protocol.Slice{{Index: c.Index, UUID: c.UUID, MemoryGiB: 1}}}
	}
	cards := []protocol.Card{card(0, false), card(1, true)}
	r := &Reporter{Client: cs, Cards: func() []protocol.Card { return cards }, Why: why, Now: func() time.Time { return t1 },
		Pods: func() ([]*v1.Pod, error) {
			list, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
			var out []*v1.Pod
			for i := range list.Items {
				out = append(out, &list.Items[i])
			}
			return out, err
		},
		Grants: func([]*v1.Pod) ([]store.Grant, error) {
			return []store.Grant{grant("on-sick", cards[0]), grant("on-well", cards[1]), grant("done", cards[0])}, nil
		}}
	status := func() map[string]string {
		out := map[string]string{}
		for _, p := range pods {
			got, err := cs.CoreV1().Pods("default").Get(context.Background(), p.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if c := condition(got); c != nil {
				out[p.Name] = string(c.Status) + " " + c.Reason
			}
		}
		return out
	}
	if err := r.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"on-sick": "False CardUnhealthy"}, status()); diff != "" {
		t.Errorf("after the card failed (-want +got):\n%s", diff)
	}
	cards[0].Healthy = true
	if err := r.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"on-sick": "True CardHealthy"}, status()); diff != "" {
		t.Errorf("after the card recovered (-want +got):\n%s", diff)
	}
}

func TestConditionPatch(t *testing.T) {
	got, err := ConditionPatch("u1", v1.PodCondition{Type: ConditionType, Status: v1.ConditionFalse, Reason: ReasonUnhealthy, LastTransitionTime: t0})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"uid":"u1"},"status":{"conditions":[{"type":"qgpu.io/CardHealthy","status":"False","lastProbeTime":null,"lastTransitionTime":"2026-01-01T00:00:00Z","reason":"CardUnhealthy"}]}}`
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("patch (-want +got):\n%s", diff)
	}
}
