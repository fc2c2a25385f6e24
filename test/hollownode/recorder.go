package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// recordingRuntime is the kubelet's CRI client with one addition: after
// each successful CreateContainer it writes what the device plugins handed
// the container to <dir>/<namespace>_<pod>_<container>.env, so that tests
// can assert exactly what the agent's Allocate returned. Only the
// device-plugin variables are written, not the pod's own env or the service
// links, which the CRI request mixes in.
type recordingRuntime struct {
	internalapi.RuntimeService
	dir     string
	devices *deviceContainerManager
}

func (r *recordingRuntime) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := r.RuntimeService.CreateContainer(ctx, podSandboxID, config, sandboxConfig)
	if err != nil {
		return id, err
	}
	pod, ctr := sandboxConfig.GetMetadata(), config.GetMetadata()
	envs := r.devices.takeDeviceEnvs(pod.GetUid(), ctr.GetName())
	lines := make([]string, 0, len(envs))
	for _, e := range envs {
		lines = append(lines, e.Name+"="+e.Value)
	}
	sort.Strings(lines)
	name := fmt.Sprintf("%s_%s_%s.env", pod.GetNamespace(), pod.GetName(), ctr.GetName())
	if err := writeFileAtomic(filepath.Join(r.dir, name), []byte(strings.Join(lines, "\n")+"\n")); err != nil {
		// Not fatal for the kubelet; the test reading the file will fail.
		klog.ErrorS(err, "Recording container environment", "file", name)
	}
	return id, nil
}

// writeFileAtomic writes data so that a reader sees either the old file or
// the whole new one: temp file in the same directory, fsync, rename.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return fmt.Errorf("creating temp file for %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return nil
}
