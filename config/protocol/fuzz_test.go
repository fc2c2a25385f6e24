package protocol

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// mustJSON marshals v without validating it, so tests can build bad input.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func FuzzDecodeInventory(f *testing.F) {
	f.Add(mustJSON(inventory(cards(2, 32)...)))
	f.Add(mustJSON(inventory()))
	f.Add(`{"version":"qgpu.io/v1","cards":null}`)
	f.Add(`{"version":"qgpu.io/v1","cards":[{"index":0,"uuid":"GPU-\u00e9","model":"T4 \ud800","memoryMiB":1024,"healthy":false}]}`)
	f.Add(`{"VERSION":"qgpu.io/v1","cards":[],"version":"x"}`)
	f.Add(`{"version":"qgpu.io/v1","cards":[]} {}`)
	f.Fuzz(func(t *testing.T, data string) {
		inv, err := DecodeInventory([]byte(data))
		if err != nil {
			if inv != nil {
				t.Fatalf("DecodeInventory returned %+v with error %v", inv, err)
			}
			return
		}
		if errs := inv.Validate(); len(errs) > 0 {
			t.Fatalf("decoded inventory does not validate: %v", errs)
		}
		s, err := inv.Encode()
		if err != nil {
			t.Fatalf("Encode of a decoded inventory: %v", err)
		}
		again, err := DecodeInventory([]byte(s))
		if err != nil {
			t.Fatalf("DecodeInventory(Encode()) = %v for %s", err, s)
		}
		if diff := cmp.Diff(inv, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

func FuzzDecodeAssignment(f *testing.F) {
	f.Add(mustJSON(assignment(ClassGeneral, container("a", slice(0, 4, 30)), container("b", slice(1, 2, 20)))))
	f.Add(mustJSON(assignment(ClassGeneral, container("a", slice(0, 16, 100), slice(3, 16, 100)))))
	f.Add(mustJSON(assignment(ClassOnline, container("a", slice(2, 8, 0)))))
	f.Add(mustJSON(assignment(ClassOffline, container("a", slice(2, 8, 60)), container("b", slice(2, 1, 40)))))
	f.Add(`{"version":"qgpu.io/v1","podUID":"u","node":"n","class":"online","containers":[{"name":"a","slices":[{"index":0,"uuid":"x","memoryGiB":1,"cores":0}]}]}`)
	f.Add(`{"version":"qgpu.io/v1","podUID":"u","node":"n","class":"general","containers":[{"name":"a","slices":[{"index":0,"uuid":"x","memoryGiB":1,"cores":1},{"index":0,"uuid":"x","memoryGiB":1,"cores":1}]}]}`)
	f.Fuzz(func(t *testing.T, data string) {
		a, err := DecodeAssignment([]byte(data))
		if err != nil {
			if a != nil {
				t.Fatalf("DecodeAssignment returned %+v with error %v", a, err)
			}
			return
		}
		if errs := a.Validate(); len(errs) > 0 {
			t.Fatalf("decoded assignment does not validate: %v", errs)
		}
		s, err := a.Encode()
		if err != nil {
			t.Fatalf("Encode of a decoded assignment: %v", err)
		}
		again, err := DecodeAssignment([]byte(s))
		if err != nil {
			t.Fatalf("DecodeAssignment(Encode()) = %v for %s", err, s)
		}
		if diff := cmp.Diff(a, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
