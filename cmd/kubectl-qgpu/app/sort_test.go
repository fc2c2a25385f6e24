package app

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type sortItem struct {
	Name  string `json:"name"`
	Value any    `json:"value,omitempty"`
}

func TestSortItems(t *testing.T) {
	cases := []struct {
		name    string
		field   string
		values  []any // of items a, b, c, ...
		want    string
		wantErr string
	}{
		{"no field keeps the order", "", []any{int64(2), int64(1)}, "ab", ""},
		{"numbers", ".value", []any{int64(10), 2.5, int64(-1)}, "cba", ""},
		{"strings, byte order", "{.value}", []any{"b", "a", "B"}, "cba", ""},
		{"booleans", "value", []any{true, false}, "ba", ""},
		{"missing first, equal keep their order", ".value", []any{int64(1), nil, int64(1), nil}, "bdac", ""},
		{"the name field", "name", []any{nil, nil}, "ab", ""},
		{"mixed types", ".value", []any{"1", int64(1)}, "", "cannot order"},
		{"objects", ".value", []any{map[string]any{"x": int64(1)}, map[string]any{"x": int64(2)}}, "", "lists or objects"},
		{"no item has it", ".nothing", []any{int64(1)}, "", "no item has a field .nothing"},
		{"not a field spec", "{.a}{.b}", []any{int64(1)}, "", "invalid value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var items []sortItem
			for i, v := range tc.values {
				items = append(items, sortItem{Name: string(rune('a' + i)), Value: v})
			}
			err := sortItems(items, tc.field)
			if wantError(t, err, tc.wantErr) {
				return
			}
			var got strings.Builder
			for _, it := range items {
				got.WriteString(it.Name)
			}
			if diff := cmp.Diff(tc.want, got.String()); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}
