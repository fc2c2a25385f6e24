package nvml

import (
	"errors"
	"testing"
)

func FuzzParseFakeSpec(f *testing.F) {
	for _, s := range []string{"4xT4", "2xA100-80G,1xT4", "2x20480MiB:MyModel", "24GiB", "x", "1x", ",,", "64x1GiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		cards, err := ParseFakeSpec(spec)
		if err != nil {
			if !errors.Is(err, ErrFakeSpec) {
				t.Fatalf("error does not wrap ErrFakeSpec: %v", err)
			}
			return
		}
		if len(cards) == 0 || len(cards) > 64 {
			t.Fatalf("%d cards", len(cards))
		}
		for _, c := range cards {
			if c.MemoryMiB < 1024 || c.MemoryMiB > 16<<20 || c.Model == "" || len(c.Model) > 128 {
				t.Fatalf("bad card %+v", c)
			}
		}
		// Whatever parses must make a valid inventory.
		d, err := Open(NewFake(cards, "node", ""))
		if err != nil {
			t.Fatal(err)
		}
		if inv := (invOf(d.Cards())); len(inv.Validate()) != 0 {
			t.Fatalf("invalid inventory: %v", inv.Validate())
		}
	})
}
