package deviceplugin

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
	"github.com/qgpu-scheduler/qgpu/plugins/qgpu/request/vocab"
)

// HAMiSplitCount is how many nvidia.com/gpu devices each card lists: HAMi's
// default deviceSplitCount. The scheduler's pods-per-card limit still
// applies; this only bounds how many HAMi containers a card can admit.
const HAMiSplitCount = 10

// VocabularySocketNames are the sockets of the vocabularies' plugins
// (docs/vocabularies.md#what-the-agent-advertises), by resource.
var VocabularySocketNames = map[string]string{
	vocab.VCUDACore:     "qgpu-vcuda-core.sock",
	vocab.T9kGPU:        "qgpu-t9k-gpu.sock",
	vocab.T9kGPUPercent: "qgpu-t9k-gpu-percent.sock",
	vocab.T9kGPUNode:    "qgpu-t9k-gpu-node.sock",
	vocab.HAMiGPU:       "qgpu-hami-gpu.sock",
}

// perCard is each advertised resource's devices per card; nvidia-gpu-node
// has one device per node instead.
var perCard = map[string]int64{
	vocab.VCUDACore:     protocol.CoresPerCard,
	vocab.T9kGPU:        1,
	vocab.T9kGPUPercent: protocol.CoresPerCard,
	vocab.HAMiGPU:       HAMiSplitCount,
}

// VocabularyDevices returns the device list of a vocabulary's resource:
// percent resources 100 per card (they sum to at most 100 per card in the
// ledger), card counts one per card (HAMi's HAMiSplitCount, since HAMi's
// nvidia.com/gpu counts shares of cards), and nvidia-gpu-node one for the
// node, healthy only while every card is (it takes them all). Like the
// native IDs they only count.
func VocabularyDevices(resource string, cards []protocol.Card) []*pluginapi.Device {
	kind := strings.TrimSuffix(strings.TrimPrefix(VocabularySocketNames[resource], "qgpu-"), ".sock")
	if resource == vocab.T9kGPUNode {
		if len(cards) == 0 {
			return nil
		}
		health := pluginapi.Healthy
		for _, c := range cards {
			if !c.Healthy {
				health = pluginapi.Unhealthy
			}
		}
		return []*pluginapi.Device{{ID: fmt.Sprintf("%s-%s-0", cards[0].UUID, kind), Health: health}}
	}
	var out []*pluginapi.Device
	for _, c := range cards {
		health := pluginapi.Healthy
		if !c.Healthy {
			health = pluginapi.Unhealthy
		}
		for i := range perCard[resource] {
			out = append(out, &pluginapi.Device{ID: fmt.Sprintf("%s-%s-%d", c.UUID, kind, i), Health: health})
		}
	}
	return out
}

// devicesFor is Devices for native resources, VocabularyDevices for the others.
func devicesFor(resource string, cards []protocol.Card) []*pluginapi.Device {
	if _, ok := VocabularySocketNames[resource]; ok {
		return VocabularyDevices(resource, cards)
	}
	return Devices(resource, cards)
}

// AddVocabularies adds the plugins of each vocabulary's advertised resources
// (vocab.Advertised) to the manager, before Start or Run.
func (m *Manager) AddVocabularies(vs []vocab.Vocabulary, cards []protocol.Card, alloc Allocator) {
	for _, v := range vs {
		for _, r := range vocab.Advertised(v) {
			p := NewPlugin(r, filepath.Join(m.Dir, VocabularySocketNames[r]), alloc)
			p.SetDevices(VocabularyDevices(r, cards))
			m.Plugins = append(m.Plugins, p)
		}
	}
}

// EnabledVocabularies are the vocabularies the agent serves: those its flag
// names and those the node's labels enable (vocabulary.qgpu.io/<name>=enable),
// each once, in vocab.All's order.
func EnabledVocabularies(flagged []vocab.Vocabulary, labels map[string]string) []vocab.Vocabulary {
	var out []vocab.Vocabulary
	for _, v := range vocab.All {
		if slices.Contains(flagged, v) || labels[vocab.Label(v)] == protocol.LabelValueEnable {
			out = append(out, v)
		}
	}
	return out
}
