package quota

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func TestParseSpec(t *testing.T) {
	cases := []struct {
		name, ns, value string
		want            Spec
		// wantErr is a part of the error, which must name the field and value.
		wantErr string
	}{
		{name: "cards and memory", ns: "team-a", value: "T4: {cards: 2, memoryGiB: 30}\nA100: {cards: 0.5}",
			want: Spec{{Model: "A100", Cores: 50, MemoryGiB: Unlimited}, {Model: "T4", Cores: 200, MemoryGiB: 30}}},
		{name: "every model", ns: "b", value: `"*": {memoryGiB: 8}`, want: Spec{{Model: AnyModel, Cores: Unlimited, MemoryGiB: 8}}},
		{name: "zero forbids", ns: "b", value: "V100: {cards: 0}", want: Spec{{Model: "V100", Cores: 0, MemoryGiB: Unlimited}}},
		{name: "json", ns: "b", value: `{"T4": {"cards": 1.25}}`, want: Spec{{Model: "T4", Cores: 125, MemoryGiB: Unlimited}}},
		{name: "negative cards", ns: "team-a", value: "T4: {cards: -1}", wantErr: "data[team-a].T4.cards: value -1 must be"},
		{name: "three decimals", ns: "team-a", value: "T4: {cards: 1.234}", wantErr: "data[team-a].T4.cards: value 1.234"},
		{name: "negative memory", ns: "team-a", value: "T4: {memoryGiB: -4}", wantErr: "data[team-a].T4.memoryGiB: value -4 must not be negative"},
		{name: "fractional memory", ns: "team-a", value: "T4: {memoryGiB: 1.5}", wantErr: "data[team-a]"},
		{name: "neither", ns: "team-a", value: "T4: {}", wantErr: "data[team-a].T4: sets neither cards nor memoryGiB"},
		{name: "unknown field", ns: "team-a", value: "T4: {card: 2}", wantErr: `data[team-a]: value "T4: {card: 2}": want a map of model to {cards, memoryGiB}: error unmarshaling JSON: while decoding JSON: json: unknown field "card"`},
		{name: "empty", ns: "team-a", value: "", wantErr: `data[team-a]: value "" names no model`},
		{name: "not a map", ns: "team-a", value: "2", wantErr: `data[team-a]: value "2": want a map of model to {cards, memoryGiB}`},
		{name: "key not a namespace", ns: "Team_A", value: "T4: {cards: 1}", wantErr: `data[Team_A]: key "Team_A" is not a namespace name`},
		{name: "comma in model", ns: "a", value: `"T4,A10": {cards: 1}`, wantErr: `data[a].T4,A10: model key "T4,A10"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseSpec(c.ns, c.value)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseConfigMapKeepsGoodEntries(t *testing.T) {
	cm := &v1.ConfigMap{Data: map[string]string{"a": "T4: {cards: 1}", "b": "T4: {cards: -1}"}, BinaryData: map[string][]byte{"c": nil}}
	specs, errs := ParseConfigMap(cm)
	if diff := cmp.Diff(map[string]Spec{"a": {{Model: "T4", Cores: 100, MemoryGiB: Unlimited}}}, specs); diff != "" {
		t.Errorf("specs (-want +got):\n%s", diff)
	}
	if len(errs) != 2 || errs["b"] == nil || errs["c"] == nil {
		t.Errorf("errors %v, want one for b and one for c", errs)
	}
}

func TestLimitMatches(t *testing.T) {
	cases := []struct {
		key, model string
		want       bool
	}{
		{"T4", "Tesla-T4", true},
		{"t4", "TESLA-T4", true},
		{"A100", "NVIDIA A100-SXM4-80GB", true},
		{"A100-80GB", "NVIDIA A100-SXM4-40GB", false},
		{"*", "anything", true},
		{"V100", "Tesla-T4", false},
	}
	for _, c := range cases {
		if got := (Limit{Model: c.key}).Matches(c.model); got != c.want {
			t.Errorf("limit %q matches %q: %v, want %v", c.key, c.model, got, c.want)
		}
	}
}

func TestFormatCards(t *testing.T) {
	for cores, want := range map[int64]string{0: "0", 100: "1", 150: "1.5", 205: "2.05", 30: "0.3", Unlimited: "-"} {
		if got := FormatCards(cores); got != want {
			t.Errorf("FormatCards(%d) = %q, want %q", cores, got, want)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add("team-a", "T4: {cards: 2, memoryGiB: 30}")
	f.Add("b", `"*": {cards: 0.25}`)
	f.Add("c", "{}")
	f.Fuzz(func(t *testing.T, ns, value string) {
		spec, err := ParseSpec(ns, value)
		if err != nil {
			if !strings.Contains(err.Error(), "data[") {
				t.Fatalf("error %q does not name the field", err)
			}
			return
		}
		if len(spec) == 0 {
			t.Fatal("a valid spec has at least one limit")
		}
		for _, l := range spec {
			if l.Cores < Unlimited || l.MemoryGiB < Unlimited || (l.Cores == Unlimited && l.MemoryGiB == Unlimited) {
				t.Fatalf("limit %+v out of range", l)
			}
		}
	})
}

// The scheduler reads qgpu-quota in its own pod's namespace, whatever an
// overlay names it; outside a pod, in the shipped one.
func TestNamespace(t *testing.T) {
	for env, want := range map[string]string{"": ConfigMapNamespace, "gpu-infra": "gpu-infra"} {
		getenv := func(k string) string {
			if k == NamespaceEnv {
				return env
			}
			return ""
		}
		if got := Namespace(getenv); got != want {
			t.Errorf("POD_NAMESPACE %q: namespace %q, want %q", env, got, want)
		}
	}
}
