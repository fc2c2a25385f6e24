package enforce

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

var cmpProto = cmpopts.IgnoreUnexported(pluginapi.Mount{})

func req(resource string, class protocol.Class, policy protocol.Policy, slices ...protocol.Slice) Request {
	return Request{Resource: resource, Class: class, Policy: policy, Slices: slices, Namespace: "ns", Pod: "p", Container: "c",
		CardSlices: func(string) ([]protocol.Slice, error) { return nil, nil }} // alone on its cards
}

var (
	shared = protocol.Slice{Index: 1, UUID: "GPU-1", MemoryGiB: 4, Cores: 30}
	whole0 = protocol.Slice{Index: 0, UUID: "GPU-0", MemoryGiB: 8, Cores: 100}
	whole2 = protocol.Slice{Index: 2, UUID: "GPU-2", MemoryGiB: 8, Cores: 100}
)

func TestEnv(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		want map[string]string
	}{
		{"memory", req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyBestEffort, shared), map[string]string{
			"NVIDIA_VISIBLE_DEVICES": "GPU-1", "QGPU_CARD_INDEX": "1", "QGPU_MEMORY_GIB": "4",
			"QGPU_CLASS": "general", "QGPU_POLICY": "best-effort"}},
		{"two whole cards", req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, whole0, whole2), map[string]string{
			"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-2", "QGPU_CARD_INDEX": "0,2", "QGPU_MEMORY_GIB": "16",
			"QGPU_CLASS": "general", "QGPU_POLICY": "fixed-share"}},
		{"core", req(protocol.ResourceCore, protocol.ClassGeneral, protocol.PolicyBestEffort, shared), map[string]string{"QGPU_CORES": "30"}},
		{"core-greedy", req(protocol.ResourceCoreGreedy, protocol.ClassOffline, protocol.PolicyBestEffort, shared), map[string]string{"QGPU_CORES": "30"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Env{}.Allocate(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Envs); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := (Env{}).Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyBestEffort)); err == nil {
		t.Error("no slices: no error")
	}
}

// mpsNode is --mps-root with the cards' daemons marked ready as the
// control daemon DaemonSet marks them, each with its shared memory
// directory.
func mpsNode(t *testing.T, ready ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, u := range ready {
		for _, dir := range []string{"pipe", MPSShmDir} {
			if err := os.MkdirAll(filepath.Join(root, u, dir), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(root, u, MPSReadyFile), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	daemonTakesCeilings(t, root)
	return root
}

// Waits of the MPS backend in these tests. patientMPSWait bounds a wait for
// something the test or daemonTakesCeilings does: generous, as only a
// failing test waits it out (a loaded CI machine can take seconds to run a
// goroutine). refusedMPSWait bounds a wait for something that never comes,
// a refusal the test expects; a slow machine only refuses the surer.
const (
	patientMPSWait = time.Minute
	refusedMPSWait = 200 * time.Millisecond
)

// daemonTakesCeilings stands in for the control daemon's side of the
// ceiling protocol (agent/enforce/mpsd tests the real one): every ceiling
// file under root is marked in force, until the test ends.
func daemonTakesCeilings(t *testing.T, root string) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			files, _ := filepath.Glob(filepath.Join(root, "*", MPSCeilingFile))
			for _, f := range files {
				if raw, err := os.ReadFile(f); err == nil {
					_ = os.WriteFile(filepath.Join(filepath.Dir(f), MPSCeilingAppliedFile), raw, 0o644)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

func TestMPS(t *testing.T) {
	root := mpsNode(t, "GPU-1")
	b, err := New(NameMPS, Options{MPS: MPSRoot{Root: root, Wait: patientMPSWait}})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := b.Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared))
	if err != nil {
		t.Fatal(err)
	}
	if mem.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=4096M" || mem.Envs["CUDA_MPS_PIPE_DIRECTORY"] != MPSContainerPipeDir {
		t.Errorf("memory envs %v", mem.Envs)
	}
	want := []*pluginapi.Mount{
		{ContainerPath: MPSContainerPipeDir, HostPath: filepath.Join(root, "GPU-1", "pipe"), ReadOnly: true},
		{ContainerPath: MPSContainerShmDir, HostPath: filepath.Join(root, "GPU-1", MPSShmDir)},
	}
	if diff := cmp.Diff(want, mem.Mounts, cmpProto); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	for policy, want := range map[protocol.Policy]string{protocol.PolicyFixedShare: "30", protocol.PolicyBurstShare: "30", protocol.PolicyBestEffort: ""} {
		got, _ := b.Allocate(req(protocol.ResourceCoreGreedy, protocol.ClassOffline, policy, shared))
		if got.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != want {
			t.Errorf("%s: thread percentage %q, want %q", policy, got.Envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], want)
		}
	}
	for _, u := range []string{whole0.UUID, whole2.UUID} { // the control daemon switched them
		if err := os.MkdirAll(filepath.Join(root, u), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, u, MPSWholeFile), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	whole, err := b.Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, whole0, whole2))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := whole.Envs["CUDA_MPS_PIPE_DIRECTORY"]; ok || len(whole.Mounts) != 0 {
		t.Errorf("whole cards got MPS: %v %v", whole.Envs, whole.Mounts)
	}
}

// TestMPSWholeCard: a card handed out whole is first asked out of MPS
// (request "whole"), and answered only once the control daemon marked it
// whole (DEFAULT compute mode: under EXCLUSIVE_PROCESS the pod could run one
// CUDA process on it); without the daemon's switch the Allocate is
// refused. A slice on that card later asks it back (request "shared") and
// waits for the daemon to be ready again.
func TestMPSWholeCard(t *testing.T) {
	root := mpsNode(t, whole0.UUID)
	b := &MPS{Control: MPSRoot{Root: root, Wait: refusedMPSWait}}
	whole := req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, whole0)
	_, err := b.Allocate(whole)
	if !errors.Is(err, ErrMPSNotReady) || !strings.Contains(err.Error(), "whole") {
		t.Fatalf("no switch by the daemon: %v, want ErrMPSNotReady naming the request", err)
	}
	// From here on every switch comes: wait for it as long as it takes.
	b.Control = MPSRoot{Root: root, Wait: patientMPSWait}
	request := filepath.Join(root, whole0.UUID, MPSRequestFile)
	if got, _ := os.ReadFile(request); string(got) != MPSRequestWhole {
		t.Fatalf("request %q, want %q", got, MPSRequestWhole)
	}
	// The daemon switches: its ready file goes, the card is marked whole.
	os.Remove(filepath.Join(root, whole0.UUID, MPSReadyFile))
	if err := os.WriteFile(filepath.Join(root, whole0.UUID, MPSWholeFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Allocate(whole); err != nil {
		t.Fatalf("card marked whole: %v", err)
	}
	// A slice on the card: asked back to shared; the daemon comes back.
	slice := protocol.Slice{Index: whole0.Index, UUID: whole0.UUID, MemoryGiB: 4, Cores: 30}
	done := make(chan error, 1)
	go func() {
		_, err := b.Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, slice))
		done <- err
	}()
	for deadline := time.Now().Add(patientMPSWait); ; time.Sleep(10 * time.Millisecond) {
		if got, _ := os.ReadFile(request); string(got) == MPSRequestShared {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a slice on a whole card did not ask for it back")
		}
	}
	os.Remove(filepath.Join(root, whole0.UUID, MPSWholeFile))
	if err := os.WriteFile(filepath.Join(root, whole0.UUID, MPSReadyFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("slice once the daemon is back: %v", err)
	}
}

// TestMPSNotReady: a card whose control daemon is not ready (the agent
// used to create the pipe directory itself and hand it out with no daemon
// behind it: the client then runs without MPS, unlimited) is refused.
func TestMPSNotReady(t *testing.T) {
	root := mpsNode(t, "GPU-0")
	b, err := New(NameMPS, Options{MPSRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared))
	if !errors.Is(err, ErrMPSNotReady) || !strings.Contains(err.Error(), "GPU-1") {
		t.Fatalf("err = %v, want ErrMPSNotReady naming GPU-1", err)
	}
	if _, err := os.Stat(filepath.Join(root, "GPU-1")); !os.IsNotExist(err) {
		t.Errorf("refused Allocate created %s: %v", filepath.Join(root, "GPU-1"), err)
	}
	noShm := t.TempDir()
	os.MkdirAll(filepath.Join(noShm, "GPU-1"), 0o755)
	os.WriteFile(filepath.Join(noShm, "GPU-1", MPSReadyFile), nil, 0o644)
	if _, _, err := (MPSRoot{Root: noShm}).Dirs("GPU-1"); !errors.Is(err, ErrMPSNotReady) || !strings.Contains(err.Error(), "shared memory") {
		t.Errorf("no shm directory: %v", err)
	}
}

func TestNewUnknown(t *testing.T) {
	if _, err := New("qgpu-driver", Options{}); err == nil {
		t.Error("unknown backend: no error")
	}
}
