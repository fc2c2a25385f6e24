package deviceplugin

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

func TestVocabularyDevices(t *testing.T) {
	cards := testCards()
	cards[1].Healthy = false
	tests := []struct {
		resource         string
		healthy, unknown int
	}{
		{vocab.VCUDACore, 100, 100},
		{vocab.T9kGPU, 1, 1},
		{vocab.T9kGPUPercent, 100, 100},
		{vocab.T9kGPUNode, 0, 1}, // one card unhealthy: the node cannot be taken whole
		{vocab.HAMiGPU, HAMiSplitCount, HAMiSplitCount},
	}
	for _, tt := range tests {
		t.Run(tt.resource, func(t *testing.T) {
			devs := VocabularyDevices(tt.resource, cards)
			got := healthCount(devs)
			if got[pluginapi.Healthy] != tt.healthy || got[pluginapi.Unhealthy] != tt.unknown {
				t.Errorf("health counts %v, want %d healthy, %d unhealthy", got, tt.healthy, tt.unknown)
			}
			ids := map[string]bool{}
			for _, d := range devs {
				if ids[d.ID] {
					t.Fatalf("duplicate ID %s", d.ID)
				}
				ids[d.ID] = true
			}
		})
	}
	if VocabularyDevices(vocab.T9kGPUNode, nil) != nil {
		t.Error("a node without cards lists nvidia-gpu-node")
	}
}

func TestEnabledVocabularies(t *testing.T) {
	got := EnabledVocabularies([]vocab.Vocabulary{vocab.HAMi}, map[string]string{vocab.Label(vocab.T9k): "enable", vocab.Label(vocab.VCUDA): "no"})
	if diff := cmp.Diff([]vocab.Vocabulary{vocab.T9k, vocab.HAMi}, got); diff != "" {
		t.Error(diff)
	}
}

// The vocabularies' plugins register with the kubelet beside the native
// ones, under their own resource names, and answer Allocate through the
// same allocator.
func TestVocabularyPluginsRegister(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	kubelet := startKubelet(t, dir)
	m := NewManager(dir, testCards(), fakeAlloc{})
	m.AddVocabularies([]vocab.Vocabulary{vocab.T9k, vocab.HAMi}, testCards(), fakeAlloc{})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	got := map[string]string{}
	for len(got) < 7 {
		select {
		case r := <-kubelet.reqs:
			got[r.ResourceName] = r.Endpoint
		case <-time.After(time.Minute): // a hang, not a slow machine
			t.Fatalf("registrations: %v, want 3 native + 4 vocabulary resources", got)
		}
	}
	for _, r := range []string{vocab.T9kGPU, vocab.T9kGPUPercent, vocab.T9kGPUNode, vocab.HAMiGPU} {
		if got[r] != VocabularySocketNames[r] {
			t.Errorf("%s registered at %q, want %q", r, got[r], VocabularySocketNames[r])
		}
	}
	if _, ok := got[vocab.VCUDACore]; ok {
		t.Error("vcuda registered though not enabled")
	}
	conn, err := dial(m.Plugins[len(m.Plugins)-1].Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	id := VocabularyDevices(vocab.HAMiGPU, testCards())[0].ID
	resp, err := pluginapi.NewDevicePluginClient(conn).Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{id}}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.ContainerResponses[0].Envs["R"]; r != vocab.HAMiGPU {
		t.Errorf("allocator called for %q, want %q", r, vocab.HAMiGPU)
	}
}
