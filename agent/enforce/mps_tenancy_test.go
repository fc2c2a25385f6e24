package enforce

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestMPSPipeDirReadOnly: a client gets its card's pipe directory
// read-only, also once the runtime has applied the container's CDI spec:
// a client only connects to the daemon's sockets and opens the FIFOs the
// server made there, which a read-only mount allows, and with a writable
// one a root tenant could remove the control socket and so take MPS off
// the card for every tenant on it (docs/backend-mps.md#the-pipe-directory-read-only).
// Fails on eebf961, which mounted it read-write.
func TestMPSPipeDirReadOnly(t *testing.T) {
	root := mpsNode(t, shared.UUID)
	specs, static := cdiNode(t, shared.UUID)
	d, err := NewDelivery(StrategyCDICRI, specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, delivery := range []*Delivery{nil, d} {
		b, err := New(NameMPS, Options{MPSRoot: root, Delivery: delivery})
		if err != nil {
			t.Fatal(err)
		}
		r := req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, shared)
		r.PodUID = "uid-1"
		resp, err := b.Allocate(r)
		if err != nil {
			t.Fatal(err)
		}
		if delivery == nil {
			for _, m := range resp.Mounts {
				if m.ContainerPath == MPSContainerPipeDir && !m.ReadOnly {
					t.Errorf("pipe directory %s mounted read-write", m.HostPath)
				}
			}
			continue
		}
		found := false
		for _, m := range inject(t, specs, static, cdiNames(resp)).Mounts {
			if m.Destination == MPSContainerPipeDir {
				found = true
				if !slices.Contains(m.Options, "ro") || slices.Contains(m.Options, "rw") {
					t.Errorf("pipe directory in the container's spec with options %v, want ro", m.Options)
				}
			}
		}
		if !found {
			t.Errorf("no %s mount in the container's CDI spec", MPSContainerPipeDir)
		}
	}
}

// TestMPSShmPerCard: a client's /dev/shm is its card's shared memory
// directory (<mps root>/<uuid>/shm, which the card's daemon, and so its
// server, has at /dev/shm), not one directory for the node: MPS needs a
// client and its server to share /dev/shm, and no more, so a tenant's
// POSIX shared memory (DataLoader, NCCL) is out of reach of the tenants of
// other cards. A card whose directory is missing is refused. Fails on
// eebf961, which mounted <mps root>/shm in every client of the node.
func TestMPSShmPerCard(t *testing.T) {
	other := protocol.Slice{Index: 2, UUID: "GPU-2", MemoryGiB: 4, Cores: 30}
	root := mpsNode(t, shared.UUID, other.UUID)
	b, err := New(NameMPS, Options{MPSRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	shmOf := func(s protocol.Slice) string {
		t.Helper()
		resp, err := b.Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, s))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range resp.Mounts {
			if m.ContainerPath == MPSContainerShmDir {
				if m.ReadOnly {
					t.Errorf("%s mounted read-only", m.HostPath)
				}
				return m.HostPath
			}
		}
		t.Fatalf("no %s mount: %v", MPSContainerShmDir, resp.Mounts)
		return ""
	}
	if got, want := shmOf(shared), filepath.Join(root, shared.UUID, MPSShmDir); got != want {
		t.Errorf("GPU-1's client: /dev/shm from %s, want %s", got, want)
	}
	if got, want := shmOf(other), filepath.Join(root, other.UUID, MPSShmDir); got != want {
		t.Errorf("GPU-2's client: /dev/shm from %s, want %s", got, want)
	}
	if err := os.Remove(filepath.Join(root, other.UUID, MPSShmDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, MPSShmDir), 0o1777); err != nil { // the old node-wide one
		t.Fatal(err)
	}
	_, err = b.Allocate(req(protocol.ResourceMemory, protocol.ClassGeneral, protocol.PolicyFixedShare, other))
	if !errors.Is(err, ErrMPSNotReady) || !strings.Contains(err.Error(), filepath.Join(root, other.UUID, MPSShmDir)) {
		t.Errorf("card without its shared memory directory: %v, want ErrMPSNotReady naming it", err)
	}
}
