package app

import "testing"

func TestBar(t *testing.T) {
	cases := []struct {
		name           string
		used, capacity int64
		width          int
		want           string
	}{
		{"empty", 0, 16, 10, "░░░░░░░░░░   0%"},
		{"half", 8, 16, 10, "█████░░░░░  50%"},
		{"rounds to nearest", 6, 16, 10, "████░░░░░░  37%"},
		{"full", 16, 16, 10, "██████████ 100%"},
		{"a little shows one cell", 1, 100, 10, "█░░░░░░░░░   1%"},
		{"almost full keeps one empty cell", 99, 100, 10, "█████████░  99%"},
		{"over capacity is marked", 20, 16, 10, "██████████ 125%!"},
		{"unknown capacity", 3, 0, 4, "░░░░    -"},
		{"negative used is empty", -2, 16, 4, "░░░░   0%"},
		{"width below 1 is 1", 16, 16, 0, "█ 100%"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := bar(tc.used, tc.capacity, tc.width); got != tc.want {
				t.Errorf("bar(%d, %d, %d) = %q, want %q", tc.used, tc.capacity, tc.width, got, tc.want)
			}
		})
	}
}
