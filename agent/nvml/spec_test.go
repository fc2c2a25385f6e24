package nvml

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFakeSpec(t *testing.T) {
	t4 := FakeCard{Model: "Tesla T4", MemoryMiB: 15109}
	a100 := FakeCard{Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920}
	tests := []struct {
		spec    string
		want    []FakeCard
		wantErr string
	}{
		{spec: "4xT4", want: []FakeCard{t4, t4, t4, t4}},
		{spec: "2xA100-80G,1xT4", want: []FakeCard{a100, a100, t4}},
		{spec: " t4 , 1Xa100-80g ", want: []FakeCard{t4, a100}},
		{spec: "V100", want: []FakeCard{{Model: "Tesla V100-SXM2-32GB", MemoryMiB: 32510}}},
		{spec: "2x20480MiB:MyModel", want: []FakeCard{{"MyModel", 20480}, {"MyModel", 20480}}},
		{spec: "24GiB", want: []FakeCard{{"Fake GPU", 24576}}},
		{spec: "1x1GiB:Tiny", want: []FakeCard{{"Tiny", 1024}}},
		{spec: "", wantErr: "empty"},
		{spec: "4xT5", wantErr: "neither a known model"},
		{spec: "0xT4", wantErr: "count"},
		{spec: "65xT4", wantErr: "count"},
		{spec: "40xT4,40xT4", wantErr: "more than 64 cards"},
		{spec: "512MiB", wantErr: "between 1GiB and 16TiB"},
		{spec: "99999999GiB", wantErr: "between 1GiB and 16TiB"},
		{spec: "-5GiB", wantErr: "not a positive integer"},
		{spec: "20480MiB:", wantErr: "model name"},
		{spec: `1x20GiB:a"b`, wantErr: "model name"},
		{spec: "T4:Custom", wantErr: "neither a known model"},
		{spec: "4xT4,", wantErr: "neither a known model"},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := ParseFakeSpec(tc.spec)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrFakeSpec) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want ErrFakeSpec containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

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
