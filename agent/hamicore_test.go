package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
	"github.com/qgpu-scheduler/qgpu/agent/hamiregion"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestRunHAMiCore runs the agent on a hami-core, burst-share node: the
// memory Allocate mounts the versioned library and the container's region
// directory, and once the container's library has written its region (here
// the test writes it, with a live process), the agent turns its switch off:
// it is alone on its card.
func TestRunHAMiCore(t *testing.T) {
	dir, host := t.TempDir(), t.TempDir()
	reg := fakeKubelet(t, dir)
	libDir, regions, procRoot := filepath.Join(host, "vgpu"), filepath.Join(host, "qgpu", "hami"), filepath.Join(host, "proc")
	for _, d := range []string{libDir, filepath.Join(procRoot, "4242")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(libDir, "libvgpu.so.v2.9.0"), []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
		protocol.LabelSchedulePolicy: "bs", protocol.LabelEnforcement: enforce.NameHAMiCore}}}
	client := fake.NewClientset(node, testPod())
	cards, _ := nvml.ParseFakeSpec("2xT4")
	fakeNVML := nvml.NewFake(cards, "n1", "")
	cfg := Config{
		NodeName: "n1", Client: client, NVML: fakeNVML, DBFile: filepath.Join(dir, "db", "meta.db"),
		DevicePluginDir: dir, Backend: enforce.NameEnv, HealthInterval: time.Hour, ReconcileInterval: time.Hour,
		HAMiLibDir: libDir, HAMiRegionRoot: regions, HAMiLockDir: filepath.Join(host, "vgpulock"), ProcRoot: procRoot,
	}
	run := startAgent(t, cfg)
	for range 3 {
		<-reg.reqs
	}
	resp := callAllocate(t, dir, protocol.ResourceMemory, fmt.Sprintf("%s-memory-0", fakeNVML.UUID(1)), fmt.Sprintf("%s-memory-1", fakeNVML.UUID(1)))
	ctr := filepath.Join(regions, "uid-p_main")
	mounts := map[string]string{}
	for _, m := range resp.ContainerResponses[0].Mounts {
		mounts[m.ContainerPath] = m.HostPath
	}
	if mounts["/usr/local/vgpu/libvgpu.so"] != filepath.Join(libDir, "libvgpu.so.v2.9.0") || mounts["/tmp/vgpu"] != ctr {
		t.Fatalf("mounts %v", mounts)
	}
	region := filepath.Join(ctr, hamiregion.FileName)
	im := hamiregion.Image{UUIDs: []string{fakeNVML.UUID(1)}, SMLimit: []uint64{25}, UtilizationSwitch: 1,
		Procs: []hamiregion.Proc{{PID: 1, HostPID: 4242, Status: 1}}}
	if err := im.WriteFile(region); err != nil {
		t.Fatal(err)
	}
	poll(t, "the burst-share switch off", func() bool {
		f, err := hamiregion.Open(region)
		if err != nil {
			return false
		}
		defer f.Close()
		s, err := f.Read()
		return err == nil && s.UtilizationSwitch == 0
	})
	run.stop(t)
}
