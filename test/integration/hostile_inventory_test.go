package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/test/builders"
	"github.com/qgpu-scheduler/qgpu/test/harness"
)

// badInventories are annotation values a broken or hostile agent (or user
// with node patch rights) could write.
func badInventories() map[string]string {
	card := `{"index":0,"uuid":"GPU-0","model":"Tesla T4","memoryMiB":15109,"healthy":true}`
	many := strings.Repeat(card+",", protocol.MaxCards) + card
	return map[string]string{
		"not json":         "not json",
		"wrong version":    `{"version":"v99","cards":[` + card + `]}`,
		"negative memory":  fmt.Sprintf(`{"version":%q,"cards":[{"index":0,"uuid":"GPU-0","model":"T4","memoryMiB":-5,"healthy":true}]}`, protocol.InventoryVersion),
		"duplicate index":  fmt.Sprintf(`{"version":%q,"cards":[%s,%s]}`, protocol.InventoryVersion, card, card),
		"too many cards":   fmt.Sprintf(`{"version":%q,"cards":[%s]}`, protocol.InventoryVersion, many),
		"unknown field":    fmt.Sprintf(`{"version":%q,"cards":[],"evil":true}`, protocol.InventoryVersion),
		"deeply nested":    strings.Repeat("[", 50000),
		"oversized":        `{"version":"` + strings.Repeat("x", 200<<10) + `"}`,
		"huge memory":      fmt.Sprintf(`{"version":%q,"cards":[{"index":0,"uuid":"GPU-0","model":"T4","memoryMiB":1e300,"healthy":true}]}`, protocol.InventoryVersion),
		"invalid utf8 key": "{\"version\xff\":1}",
	}
}

// hostileInventory gives a node every bad inventory in turn: it gets no
// pod, an InvalidQGPUInventory event says why, and the scheduler keeps
// placing good pods elsewhere as fast while the node flips its annotation.
func hostileInventory(t *testing.T, c *harness.Cluster) {
	cs := c.Client
	ctx := context.Background()
	good := builders.Inventory(builders.Cards(2, "Tesla-T4", t4MiB))
	bad := badInventories()
	hostile := builders.GPUNode("hostile", false, builders.Cards(2, "Tesla-T4", t4MiB))
	hostile.Annotations[protocol.AnnotationInventory] = "not json"
	createNodes(t, cs, hostile)
	names := make([]string, 0, len(bad))
	for name := range bad {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		// The node never has a good inventory during the loop: its update
		// and the pod's creation reach the scheduler on two watches in no
		// set order, so a good value in between could be what a pod sees.
		setInventory(t, c, "hostile", bad[name])
		p := builders.GPUPod(fmt.Sprintf("to-hostile-%d", i)).General("c", 1, 5).Obj()
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "hostile"}
		createPods(t, cs, p)
		if msg := waitFailedScheduling(t, cs, "default", p.Name); !strings.Contains(msg, "no valid qGPU inventory") {
			t.Errorf("%s: pod for the hostile node: %s", name, msg)
		}
		deletePods(t, c, p.Name)
	}
	sel := fields.Set{"involvedObject.name": "hostile", "reason": "InvalidQGPUInventory"}.String()
	evs, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil || len(evs.Items) == 0 {
		t.Errorf("no InvalidQGPUInventory event on the hostile node (%v)", err)
	} else {
		t.Logf("%d InvalidQGPUInventory events, e.g. %q", len(evs.Items), evs.Items[0].Message)
	}
	base := placeLatency(t, c, "base", 15)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	flips := 0
	wg.Go(func() {
		flips = flipInventory(c, "hostile", []string{bad["oversized"], good, bad["too many cards"], bad["deeply nested"]}, stop)
	})
	loaded := placeLatency(t, c, "flip", 15)
	close(stop)
	wg.Wait()
	t.Logf("good pods, create to bound: median %v alone, %v while the hostile node flipped its inventory %d times", base, loaded, flips)
	if loaded > 3*base+500*time.Millisecond {
		t.Errorf("a flipping hostile inventory slowed scheduling: median %v, %v without", loaded, base)
	}
	if c.Scheduler.Exited() {
		t.Fatal("the scheduler exited")
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, "hostile", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

func setInventory(t *testing.T, c *harness.Cluster, node, value string) {
	t.Helper()
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, inventoryPatch(value), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching the inventory of %s: %v", node, err)
	}
}

// flipInventory cycles the node's annotation through values every 10 ms
// until stop, at most 2000 times or 60 s.
func flipInventory(c *harness.Cluster, node string, values []string, stop <-chan struct{}) int {
	n := 0
	for deadline := time.Now().Add(time.Minute); n < 2000 && time.Now().Before(deadline); n++ {
		select {
		case <-stop:
			return n
		case <-time.After(10 * time.Millisecond):
		}
		_, _ = c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, inventoryPatch(values[n%len(values)]), metav1.PatchOptions{})
	}
	return n
}

// placeLatency creates n small general pods one after another (each on
// the A100 node, which has room for all) and returns the median time from
// create to bound; it deletes them afterwards.
func placeLatency(t *testing.T, c *harness.Cluster, prefix string, n int) time.Duration {
	t.Helper()
	var times []time.Duration
	var names []string
	for i := range n {
		p := builders.GPUPod(fmt.Sprintf("%s-%02d", prefix, i)).Annotation(protocol.AnnotationUseGPUType, "A100").General("c", 1, 2).Obj()
		start := time.Now()
		createPods(t, c.Client, p)
		waitBound(t, c.Client, "default", p.Name)
		times = append(times, time.Since(start))
		names = append(names, p.Name)
	}
	deletePods(t, c, names...)
	slices.Sort(times)
	return times[len(times)/2]
}

func inventoryPatch(value string) []byte {
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{protocol.AnnotationInventory: value}}})
	if err != nil {
		panic(err)
	}
	return b
}
