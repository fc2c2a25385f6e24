package enforce

import (
	"slices"
	"testing"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// TestMPSPipeDirReadOnly: a client gets its card's pipe directory
// read-only, also once the runtime has applied the container's CDI spec:
// a client only connects to the daemon's sockets and opens the FIFOs the
// server made there, which a read-only mount allows, and with a writable
// one a root tenant could remove the control socket and so take MPS off
// the card for every tenant on it (docs/backend-mps.md#the-pipe-directory).
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
