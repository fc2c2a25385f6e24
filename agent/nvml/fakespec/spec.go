// Package fakespec reads the --fake-cards spec of simulated cards. It is a
// leaf package (no NVML), so that tests and tools can know a fake node's
// cards without linking NVML.
package fakespec

import (
	"crypto/sha1"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// Card is one simulated card of a --fake-cards spec.
type Card struct {
	Model     string
	MemoryMiB int64
}

// knownModel is a row of the model table: the name NVML reports and the
// total memory it reports in MiB (as nvidia-smi shows it, not the marketing size).
type knownModel struct {
	Name      string
	MemoryMiB int64
}

// fakeModels maps the short names a spec may use (lower case) to real NVML values.
var fakeModels = map[string]knownModel{
	"t4":        {"Tesla T4", 15109},
	"v100":      {"Tesla V100-SXM2-32GB", 32510},
	"v100-32g":  {"Tesla V100-SXM2-32GB", 32510},
	"v100-16g":  {"Tesla V100-SXM2-16GB", 16160},
	"p40":       {"Tesla P40", 22919},
	"a10":       {"NVIDIA A10", 23028},
	"a30":       {"NVIDIA A30", 24576},
	"a100":      {"NVIDIA A100-SXM4-40GB", 40960},
	"a100-40g":  {"NVIDIA A100-SXM4-40GB", 40960},
	"a100-80g":  {"NVIDIA A100-SXM4-80GB", 81920},
	"l4":        {"NVIDIA L4", 23034},
	"l40s":      {"NVIDIA L40S", 46068},
	"h100":      {"NVIDIA H100 80GB HBM3", 81559},
	"h100-80g":  {"NVIDIA H100 80GB HBM3", 81559},
	"h200":      {"NVIDIA H200", 143771},
	"rtx4090":   {"NVIDIA GeForce RTX 4090", 24564},
	"rtx-4090":  {"NVIDIA GeForce RTX 4090", 24564},
	"a800-80g":  {"NVIDIA A800-SXM4-80GB", 81920},
	"h800":      {"NVIDIA H800", 81559},
	"v100s-32g": {"Tesla V100S-PCIE-32GB", 32510},
}

// ErrSpec is wrapped by every spec parsing error.
var ErrSpec = errors.New("invalid --fake-cards spec")

// KnownModels lists the short model names a spec accepts, sorted.
func KnownModels() []string {
	names := make([]string, 0, len(fakeModels))
	for n := range fakeModels {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Parse reads a --fake-cards value: comma-separated groups of
// "[<count>x]<card>", where <card> is a model from the table ("T4", "A100-80G")
// or an explicit size "<n>MiB" / "<n>GiB", optionally followed by ":<model name>".
// Examples: "4xT4", "2xA100-80G,1xT4", "2x20480MiB:MyModel", "24GiB".
func Parse(spec string) ([]Card, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("%w: empty", ErrSpec)
	}
	var cards []Card
	for _, group := range strings.Split(spec, ",") {
		count, card, err := parseGroup(strings.TrimSpace(group))
		if err != nil {
			return nil, fmt.Errorf("%w: group %q: %v", ErrSpec, group, err)
		}
		if len(cards)+count > protocol.MaxCards {
			return nil, fmt.Errorf("%w: more than %d cards", ErrSpec, protocol.MaxCards)
		}
		for range count {
			cards = append(cards, card)
		}
	}
	return cards, nil
}

func parseGroup(group string) (int, Card, error) {
	count := 1
	if i := strings.IndexAny(group, "xX"); i > 0 && isDigits(group[:i]) {
		n, err := strconv.Atoi(group[:i])
		if err != nil || n < 1 || n > protocol.MaxCards {
			return 0, Card{}, fmt.Errorf("count %q must be 1 to %d", group[:i], protocol.MaxCards)
		}
		count, group = n, group[i+1:]
	}
	card, err := parseCard(group)
	return count, card, err
}

func parseCard(s string) (Card, error) {
	size, name, hasName := strings.Cut(s, ":")
	if m, ok := fakeModels[strings.ToLower(size)]; ok && !hasName {
		return Card{Model: m.Name, MemoryMiB: m.MemoryMiB}, nil
	}
	mib, err := parseSize(size)
	if err != nil {
		return Card{}, err
	}
	name = strings.TrimSpace(name)
	if !hasName {
		name = "Fake GPU"
	}
	if name == "" || len(name) > 128 || strings.ContainsAny(name, ",\n\r\t\"") {
		return Card{}, fmt.Errorf("model name %q must be 1 to 128 characters without commas, quotes or control characters", name)
	}
	return Card{Model: name, MemoryMiB: mib}, nil
}

func parseSize(s string) (int64, error) {
	unit := int64(1)
	num := s
	switch {
	case strings.HasSuffix(s, "MiB"):
		num = strings.TrimSuffix(s, "MiB")
	case strings.HasSuffix(s, "GiB"):
		num, unit = strings.TrimSuffix(s, "GiB"), protocol.GiB
	default:
		return 0, fmt.Errorf("%q is neither a known model (%s) nor a size like 20480MiB or 24GiB",
			s, strings.Join(KnownModels(), ", "))
	}
	if !isDigits(num) || len(num) > 9 {
		return 0, fmt.Errorf("size %q is not a positive integer", s)
	}
	n, _ := strconv.ParseInt(num, 10, 64)
	mib := n * unit
	if mib < protocol.GiB || mib > 16<<20 {
		return 0, fmt.Errorf("size %q must be between 1GiB and 16TiB", s)
	}
	return mib, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// DriverVersion is the simulated driver's version, as the fake NVML
// reports it: a fake driver root (the e2e node's, the card spec's tests)
// holds libcuda.so.<DriverVersion>, where the CDI spec generator looks for
// the driver's libraries.
const DriverVersion = "550.54.15"

// UUID is the UUID of a simulated card: stable for a seed (the node name)
// and index, so it survives agent restarts, and distinct between nodes.
func UUID(seed string, index int) string {
	h := sha1.Sum([]byte(seed + "/" + strconv.Itoa(index)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
