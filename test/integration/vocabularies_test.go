package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// TestVocabularies runs the pods of manifests/examples/vocabularies, written
// as gpu-admission's, T9k's and HAMi's documents write them (schedulerName
// and image aside), on nodes that enable those vocabularies by label: the
// real scheduler places them, the real kubelet device manager calls the
// real agent's vocabulary plugins, and each container's environment is
// what its system promises, with the slices of the native accounting.
func TestVocabularies(t *testing.T) {
	label := func(vs ...vocab.Vocabulary) map[string]string {
		m := map[string]string{}
		for _, v := range vs {
			m[vocab.Label(v)] = protocol.LabelValueEnable
		}
		return m
	}
	c := harness.StartTestCluster(t, harness.ClusterOptions{RBAC: true, Nodes: []harness.NodeSpec{
		{Name: "a100-0", Cards: "4xA100", Labels: label(vocab.VCUDA, vocab.HAMi)},
		{Name: "t9k-0", Cards: "2xT4", Labels: label(vocab.T9k)},
		{Name: "t9k-1", Cards: "2xT4", Labels: label(vocab.T9k)},
		{Name: "t9k-2", Cards: "2xT4", Labels: label(vocab.T9k)},
		{Name: "plain-0", Cards: "2xT4"},
	}})
	pods := vocabularyPods(t)
	type want struct {
		node  string // "" any t9k node
		cards int    // per container
		env   func(cardGiB int64) map[string]string
	}
	steps := []struct {
		pod  string
		want map[string]want // by container
	}{
		{"gpu-pod2", map[string]want{
			"c0": {"a100-0", 1, fixed(map[string]string{"QGPU_MEMORY_GIB": "1", "QGPU_CORES": "20"})},
			"c1": {"a100-0", 1, fixed(map[string]string{"QGPU_MEMORY_GIB": "2", "QGPU_CORES": "20"})},
		}},
		{"shared-gpu", map[string]want{"shared": {"", 1, func(gib int64) map[string]string {
			mib := (30*gib + 99) / 100 * 1024
			return map[string]string{"T9K_GPU_PERCENT": "30", "T9K_GPU_MEMORY": strconv.FormatInt(mib, 10), "QGPU_CORES": "30"}
		}}}},
		{"exclusive-gpu", map[string]want{"exclusive": {"", 2, fixed(map[string]string{"QGPU_CORES": "200"})}}},
		{"exlusive-node", map[string]want{"exlusive": {"", 2, fixed(map[string]string{"NVIDIA_VISIBLE_DEVICES": "all", "QGPU_CORES": "200"})}}},
		{"hami-gpumem", map[string]want{"cuda": {"a100-0", 1, fixed(map[string]string{"QGPU_MEMORY_GIB": "3", "QGPU_CORES": "30"})}}},
		{"hami-gpumem-percentage", map[string]want{"cuda": {"a100-0", 1, func(gib int64) map[string]string {
			return map[string]string{"QGPU_MEMORY_GIB": strconv.FormatInt((25*gib+99)/100, 10), "QGPU_CORES": "1"}
		}}}},
	}
	t9kNodes := map[string]bool{}
	for _, s := range steps {
		createPods(t, c.Client, pods[s.pod])
		got, a := waitBound(t, c.Client, "default", s.pod)
		e2eWaitGranted(t, c.Client, got)
		node := c.Node(a.Node)
		cards := inventoryCards(t, c, a.Node)
		for _, ca := range a.Containers {
			w, ok := s.want[ca.Name]
			switch {
			case !ok:
				t.Fatalf("pod %s: unexpected container %s in the assignment", s.pod, ca.Name)
			case w.node == "" && !strings.HasPrefix(a.Node, "t9k-"), w.node != "" && a.Node != w.node:
				t.Errorf("pod %s landed on %s, want %q (or a t9k node)", s.pod, a.Node, w.node)
			case len(ca.Slices) != w.cards:
				t.Errorf("pod %s container %s holds %d cards, want %d", s.pod, ca.Name, len(ca.Slices), w.cards)
			}
			if strings.HasPrefix(a.Node, "t9k-") {
				t9kNodes[a.Node] = true
			}
			env, err := node.ContainerEnv("default", s.pod, ca.Name)
			if err != nil {
				t.Fatal(err)
			}
			var uuids []string
			for _, sl := range ca.Slices {
				uuids = append(uuids, cards[sl.Index].UUID)
			}
			wantEnv := w.env(cards[ca.Slices[0].Index].MemoryGiB())
			if _, set := wantEnv["NVIDIA_VISIBLE_DEVICES"]; !set {
				wantEnv["NVIDIA_VISIBLE_DEVICES"] = strings.Join(uuids, ",")
			}
			for k, v := range wantEnv {
				if env[k] != v {
					t.Errorf("pod %s container %s on %s cards %v: %s=%q, want %q (env %v)", s.pod, ca.Name, a.Node, uuids, k, env[k], v, env)
				}
			}
		}
	}
	if len(t9kNodes) != 3 {
		t.Errorf("the three T9k pods share nodes %v: the 2-card and the node-exclusive pod each need an empty node", t9kNodes)
	}
	t.Run("a node without the label", func(t *testing.T) {
		p := pods["shared-gpu"].DeepCopy()
		p.Name = "shared-gpu-on-plain"
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "plain-0"}
		createPods(t, c.Client, p)
		reason := waitFailedScheduling(t, c.Client, "default", p.Name)
		if !strings.Contains(reason, "node does not take t9k pods (label vocabulary.qgpu.io/t9k=enable)") {
			t.Errorf("FailedScheduling %q does not name the label", reason)
		}
	})
	checkCluster(t, c.Client)
}

func fixed(env map[string]string) func(int64) map[string]string {
	return func(int64) map[string]string {
		out := map[string]string{}
		for k, v := range env {
			out[k] = v
		}
		return out
	}
}

// vocabularyPods reads manifests/examples/vocabularies as Pods by name.
func vocabularyPods(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	objs, err := harness.ReadManifests("manifests/examples/vocabularies")
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for _, o := range objs {
		var p corev1.Pod
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &p); err != nil {
			t.Fatalf("example %s: %v", o.GetName(), err)
		}
		pods[p.Name] = &p
	}
	return pods
}

// inventoryCards is the node's inventory by card index.
func inventoryCards(t *testing.T, c *harness.Cluster, node string) map[int]protocol.Card {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := protocol.DecodeInventory([]byte(n.Annotations[protocol.AnnotationInventory]))
	if err != nil {
		t.Fatalf("node %s: %v", node, err)
	}
	out := map[int]protocol.Card{}
	for _, card := range inv.Cards {
		out[card.Index] = card
	}
	return out
}
