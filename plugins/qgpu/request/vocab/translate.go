package vocab

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// MaxCards bounds the whole cards one container may ask for.
const MaxCards = protocol.MaxCards

// Ask is one container's ask in the product's terms, before the native rules.
type Ask struct {
	// MemoryMiB is the container's memory over all its cards, when absolute.
	MemoryMiB int64
	// MemoryPercent, when > 0, is percent of each of its cards' memory
	// instead (resolved against a node's cards by the scheduler).
	MemoryPercent int64
	// Cores is percent of a card: 1..99 on one shared card, 100 per whole card.
	Cores int64
	// Cards is the number of whole cards, or 1 for a shared card.
	Cards int64
	// Whole: the cards are the container's alone.
	Whole bool
	// AllCards: every card of the node, Cards unknown until a node is chosen.
	AllCards bool
}

// Reader reads a resource of a container as a whole number: value, present, error.
type Reader func(c *v1.Container, name string) (int64, bool, error)

// Translate returns the ask of container c in vocabulary v; ok is false
// when c asks for none of v's resources.
func Translate(v Vocabulary, c *v1.Container, opts Options, read Reader) (Ask, bool, error) {
	switch v {
	case VCUDA:
		return vcuda(c, opts, read)
	case T9k:
		return t9k(c, read)
	case HAMi:
		return hami(c, read)
	}
	return Ask{}, false, fmt.Errorf("vocabulary %q: not a translated vocabulary", v)
}

func vcuda(c *v1.Container, opts Options, read Reader) (Ask, bool, error) {
	core, hasCore, err := read(c, VCUDACore)
	if err != nil {
		return Ask{}, false, err
	}
	mem, hasMem, err := read(c, VCUDAMemory)
	if err != nil {
		return Ask{}, false, err
	}
	if !hasCore && !hasMem {
		return Ask{}, false, nil
	}
	if !hasCore {
		return Ask{}, false, fmt.Errorf("containers[%s]: %s: missing: %s needs it (1 to 99 for a share of one card, 100·k for k whole cards)",
			c.Name, VCUDACore, VCUDAMemory)
	}
	unit := opts.VCUDAMemoryUnitMiB
	if unit <= 0 {
		unit = DefaultVCUDAMemoryUnitMiB
	}
	if hasMem && (mem < 1 || mem > (1<<34)/unit) {
		return Ask{}, false, fmt.Errorf("containers[%s]: %s: value %d must be between 1 and %d (units of %d MiB)", c.Name, VCUDAMemory, mem, (1<<34)/unit, unit)
	}
	a, err := cores(c.Name, VCUDACore, core)
	if err != nil {
		return Ask{}, false, err
	}
	switch {
	case hasMem:
		a.MemoryMiB = mem * unit
	case a.Whole:
		a.MemoryPercent = 100
	default:
		return Ask{}, false, fmt.Errorf("containers[%s]: %s: missing: a share of one card (%s %d) needs its memory", c.Name, VCUDAMemory, VCUDACore, core)
	}
	return a, true, nil
}

// cores reads a card percent where 100·k means k whole cards.
func cores(container, name string, v int64) (Ask, error) {
	switch {
	case v >= 1 && v < 100:
		return Ask{Cores: v, Cards: 1}, nil
	case v >= 100 && v%100 == 0 && v/100 <= MaxCards:
		return Ask{Cores: v, Cards: v / 100, Whole: true}, nil
	}
	return Ask{}, fmt.Errorf("containers[%s]: %s: value %d must be between 1 and 99, or 100·k for k whole cards (k ≤ %d)", container, name, v, MaxCards)
}

func t9k(c *v1.Container, read Reader) (Ask, bool, error) {
	var got []string
	var val int64
	for _, name := range Resources(T9k) {
		v, ok, err := read(c, name)
		if err != nil {
			return Ask{}, false, err
		}
		if ok {
			got, val = append(got, name), v
		}
	}
	switch len(got) {
	case 0:
		return Ask{}, false, nil
	case 1:
	default:
		return Ask{}, false, fmt.Errorf("containers[%s]: %s and %s: a container asks in one T9k mode only", c.Name, got[0], got[1])
	}
	switch got[0] {
	case T9kGPU:
		if val < 1 || val > MaxCards {
			return Ask{}, false, fmt.Errorf("containers[%s]: %s: value %d must be between 1 and %d whole cards", c.Name, T9kGPU, val, MaxCards)
		}
		return Ask{Cores: 100 * val, Cards: val, Whole: true, MemoryPercent: 100}, true, nil
	case T9kGPUPercent:
		if val < 1 || val > 100 {
			return Ask{}, false, fmt.Errorf("containers[%s]: %s: value %d must be between 1 and 100 (percent of one card's memory)", c.Name, T9kGPUPercent, val)
		}
		if val == 100 {
			return Ask{Cores: 100, Cards: 1, Whole: true, MemoryPercent: 100}, true, nil
		}
		// T9k shares the card by memory; the compute share follows it, so
		// that the card's core budget fills with its memory.
		return Ask{Cores: val, Cards: 1, MemoryPercent: val}, true, nil
	default: // T9kGPUNode
		if val != 1 {
			return Ask{}, false, fmt.Errorf("containers[%s]: %s: value %d must be 1 (the whole node)", c.Name, T9kGPUNode, val)
		}
		return Ask{AllCards: true, Whole: true, MemoryPercent: 100}, true, nil
	}
}

func hami(c *v1.Container, read Reader) (Ask, bool, error) {
	n, hasN, err := read(c, HAMiGPU)
	if err != nil {
		return Ask{}, false, err
	}
	var vals [3]int64
	var has [3]bool
	for i, name := range []string{HAMiMemory, HAMiMemoryPercent, HAMiCores} {
		if vals[i], has[i], err = read(c, name); err != nil {
			return Ask{}, false, err
		}
	}
	mem, pct, core := vals[0], vals[1], vals[2]
	if !hasN {
		for i, name := range []string{HAMiMemory, HAMiMemoryPercent, HAMiCores} {
			if has[i] {
				return Ask{}, false, fmt.Errorf("containers[%s]: %s: needs %s (the number of cards)", c.Name, name, HAMiGPU)
			}
		}
		return Ask{}, false, nil
	}
	switch {
	case n < 1 || n > MaxCards:
		return Ask{}, false, fmt.Errorf("containers[%s]: %s: value %d must be between 1 and %d", c.Name, HAMiGPU, n, MaxCards)
	case has[0] && has[1]:
		return Ask{}, false, fmt.Errorf("containers[%s]: %s and %s: ask for memory one way only", c.Name, HAMiMemory, HAMiMemoryPercent)
	case has[0] && (mem < 1 || mem > 1<<24):
		return Ask{}, false, fmt.Errorf("containers[%s]: %s: value %d must be between 1 and %d MiB", c.Name, HAMiMemory, mem, 1<<24)
	case has[1] && (pct < 1 || pct > 100):
		return Ask{}, false, fmt.Errorf("containers[%s]: %s: value %d must be between 1 and 100", c.Name, HAMiMemoryPercent, pct)
	case has[2] && (core < 0 || core > 100):
		return Ask{}, false, fmt.Errorf("containers[%s]: %s: value %d must be between 0 and 100", c.Name, HAMiCores, core)
	}
	a := Ask{Cards: 1, Cores: max(core, 1)}
	// Several cards for one container, or all of a card's compute, are
	// whole cards here: the ledger shares a card only with one slice per
	// container, and more than asked is granted rather than less.
	if n > 1 || core == 100 {
		a = Ask{Cards: n, Cores: 100 * n, Whole: true}
	}
	switch {
	case has[0]:
		a.MemoryMiB = mem * n
	case has[1]:
		a.MemoryPercent = pct
	default:
		// HAMi's default without a memory ask: the whole card's memory.
		a.MemoryPercent = 100
	}
	if a.Whole && a.MemoryPercent > 0 {
		a.MemoryPercent = 100
	}
	return a, true, nil
}
