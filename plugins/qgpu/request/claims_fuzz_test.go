package request

import (
	"errors"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// FuzzParseClaims: whatever a user writes into a qGPU claim's class,
// count and capacity, ParseClaims either refuses it (ErrInvalid) or
// returns a slice within the rules: whole GiB of memory, cores by class.
func FuzzParseClaims(f *testing.F) {
	f.Add("4Gi", "30", uint8(0), int64(1))
	f.Add("1500Mi", "", uint8(1), int64(1))
	f.Add("16Gi", "100", uint8(2), int64(2))
	f.Add("1e3Gi", "-1", uint8(0), int64(0))
	classes := []protocol.Class{protocol.ClassGeneral, protocol.ClassOnline, protocol.ClassOffline}
	f.Fuzz(func(t *testing.T, memory, cores string, class uint8, count int64) {
		c := classes[int(class)%len(classes)]
		claim := claimOf("a", c, "", "")
		r := claim.Spec.Devices.Requests[0].Exactly
		r.Count = count
		for name, s := range map[resourceapi.QualifiedName]string{protocol.DRACapacityMemory: memory, protocol.DRACapacityCores: cores} {
			if q, err := resource.ParseQuantity(s); err == nil {
				r.Capacity.Requests[name] = q
			}
		}
		req, err := ParseClaims(claimPod("a"), getter(claim))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("an error that is not ErrInvalid: %v", err)
			}
			return
		}
		got := req.Containers[0]
		if req.Class != c || got.MemoryGiB < 1 || got.MemoryGiB > MaxMemoryGiB || got.Cores < 0 || got.Cores > protocol.CoresPerCard ||
			(c == protocol.ClassOnline) != (got.Cores == 0) || got.Whole != (c == protocol.ClassGeneral && got.Cores == protocol.CoresPerCard) {
			t.Fatalf("memory %q cores %q class %s: accepted as %+v", memory, cores, c, got)
		}
	})
}
