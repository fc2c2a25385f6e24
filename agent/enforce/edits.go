package enforce

import (
	"fmt"
	"maps"
	"sort"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// CoreResource is the resource a container of class c holds its compute
// under: qgpu-core for general, qgpu-core-greedy for offline, none for
// online (online pods hold memory only; docs/design.md#how-a-card-is-accounted).
func CoreResource(c protocol.Class) (string, bool) {
	switch c {
	case protocol.ClassGeneral:
		return protocol.ResourceCore, true
	case protocol.ClassOffline:
		return protocol.ResourceCoreGreedy, true
	}
	return "", false
}

// Edits is what a container holding one slice gets from b: the answers of
// the memory call and of the class's core call (CoreResource), merged as
// the kubelet merges a container's Allocate answers. b must answer
// undelivered (New with no Delivery): the caller delivers the edits itself
// (the DRA kubelet plugin writes them into a CDI spec of its own). req's
// Resource is ignored.
func Edits(b Backend, req Request) (map[string]string, []*pluginapi.Mount, error) {
	resources := []string{protocol.ResourceMemory}
	if core, ok := CoreResource(req.Class); ok {
		resources = append(resources, core)
	}
	envs := map[string]string{}
	var mounts []*pluginapi.Mount
	for _, r := range resources {
		req.Resource = r
		resp, err := b.Allocate(req)
		if err != nil {
			return nil, nil, err
		}
		if len(resp.CdiDevices) > 0 || len(resp.Annotations) > 0 {
			return nil, nil, fmt.Errorf("backend %s answers through CDI already: Edits needs it undelivered", b.Name())
		}
		// No key is in two answers (README.md); the memory answer's is kept
		// if one were, as the kubelet keeps the first.
		for k, v := range resp.Envs {
			if _, ok := envs[k]; !ok {
				envs[k] = v
			}
		}
		mounts = append(mounts, resp.Mounts...)
	}
	return envs, mounts, nil
}

// CDIEdits is envs and mounts as CDI container edits: the variables sorted,
// each mount a bind mount (rbind, ro or rw, nosuid, nodev), as the agent's
// per-container specs carry them (docs/backend-env.md).
func CDIEdits(envs map[string]string, mounts []*pluginapi.Mount) cdispec.ContainerEdits {
	edits := cdispec.ContainerEdits{}
	for _, k := range sortedKeys(envs) {
		edits.Env = append(edits.Env, k+"="+envs[k])
	}
	for _, m := range mounts {
		opt := "rw"
		if m.ReadOnly {
			opt = "ro"
		}
		edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath,
			Type: "bind", Options: []string{"rbind", opt, "nosuid", "nodev"}})
	}
	return edits
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
