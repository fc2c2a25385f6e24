package fakespec

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseFakeSpec(t *testing.T) {
	t4 := Card{Model: "Tesla T4", MemoryMiB: 15109}
	a100 := Card{Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920}
	tests := []struct {
		spec    string
		want    []Card
		wantErr string
	}{
		{spec: "4xT4", want: []Card{t4, t4, t4, t4}},
		{spec: "2xA100-80G,1xT4", want: []Card{a100, a100, t4}},
		{spec: " t4 , 1Xa100-80g ", want: []Card{t4, a100}},
		{spec: "V100", want: []Card{{Model: "Tesla V100-SXM2-32GB", MemoryMiB: 32510}}},
		{spec: "2x20480MiB:MyModel", want: []Card{{"MyModel", 20480}, {"MyModel", 20480}}},
		{spec: "24GiB", want: []Card{{"Fake GPU", 24576}}},
		{spec: "1x1GiB:Tiny", want: []Card{{"Tiny", 1024}}},
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
			got, err := Parse(tc.spec)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want ErrSpec containing %q, got %v", tc.wantErr, err)
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
