package app

import (
	"fmt"
	"strings"
)

// Bar glyphs: a filled and an empty cell, as wide as one column each in
// every monospace terminal font.
const (
	barFull  = "█"
	barEmpty = "░"
	// barOver marks a card held past its capacity (an oversubscription
	// kubectl qgpu check reports).
	barOver = "!"
)

// bar renders used of capacity as width cells and the percentage, like
// `██████░░░░  60%`. Cells are rounded to the nearest, but a card with
// anything on it shows at least one filled cell and a card not quite full
// at least one empty one, so that neither looks like the other at a
// glance. A capacity of 0 renders empty (a card without memory, or a node
// whose cards are unknown); width is at least 1.
func bar(used, capacity int64, width int) string {
	width = max(width, 1)
	if capacity <= 0 {
		return strings.Repeat(barEmpty, width) + "    -"
	}
	used = max(used, 0)
	pct := used * 100 / capacity
	filled := int((used*int64(width)*2 + capacity) / (capacity * 2)) // rounded
	switch {
	case used > 0 && filled == 0:
		filled = 1
	case used < capacity && filled == width:
		filled = width - 1
	case used > capacity:
		return strings.Repeat(barFull, width) + fmt.Sprintf("%4d%%%s", pct, barOver)
	}
	return strings.Repeat(barFull, filled) + strings.Repeat(barEmpty, width-filled) + fmt.Sprintf("%4d%%", pct)
}
