package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	qnvml "github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// smiCard is a card as nvidia-smi lists it; MemoryMiB is -1 when only
// `nvidia-smi -L` was read.
type smiCard struct {
	Index     int
	UUID      string
	Name      string
	MemoryMiB int64
}

// gpuLine is a card's line of `nvidia-smi -L`; the MIG devices under it are
// indented and start with "MIG".
var gpuLine = regexp.MustCompile(`^GPU (\d+): (.+) \(UUID: (GPU-[^)]+)\)$`)

func parseSMIList(text string) ([]smiCard, error) {
	var out []smiCard
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r ")
		if !strings.HasPrefix(line, "GPU ") {
			continue
		}
		m := gpuLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("nvidia-smi -L line %q not understood", line)
		}
		i, _ := strconv.Atoi(m[1])
		out = append(out, smiCard{Index: i, Name: m[2], UUID: m[3], MemoryMiB: -1})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nvidia-smi -L lists no GPU")
	}
	return out, nil
}

// addSMIMemory fills the memory of the cards from
// `nvidia-smi --query-gpu=index,uuid,memory.total --format=csv,noheader,nounits`.
func addSMIMemory(cards []smiCard, csv string) error {
	for _, line := range strings.Split(csv, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 3 {
			return fmt.Errorf("nvidia-smi CSV line %q: want index, uuid, memory.total", line)
		}
		uuid := strings.TrimSpace(f[1])
		mib, err := strconv.ParseInt(strings.TrimSpace(f[2]), 10, 64)
		if err != nil {
			return fmt.Errorf("nvidia-smi CSV line %q: memory.total: %w", line, err)
		}
		for i := range cards {
			if cards[i].UUID == uuid {
				cards[i].MemoryMiB = mib
			}
		}
	}
	return nil
}

// compareInventory lists where the agent's discovery differs from what
// nvidia-smi lists. A card the agent left out (MIG) counts as found when it
// is named with its reason; memory may differ by 1 % (nvidia-smi's and
// NVML's totals can differ by the driver's reserved memory).
func compareInventory(cards []protocol.Card, skipped []qnvml.SkippedCard, smi []smiCard) []string {
	var problems []string
	byUUID := map[string]protocol.Card{}
	for _, c := range cards {
		byUUID[c.UUID] = c
	}
	skippedUUID := map[string]bool{}
	for _, s := range skipped {
		skippedUUID[s.UUID] = true
	}
	listed := map[string]bool{}
	for _, s := range smi {
		listed[s.UUID] = true
		c, ok := byUUID[s.UUID]
		switch {
		case skippedUUID[s.UUID]:
			continue
		case !ok:
			problems = append(problems, fmt.Sprintf("nvidia-smi's GPU %d (%s) is not among the agent's cards", s.Index, s.UUID))
			continue
		case c.Index != s.Index:
			problems = append(problems, fmt.Sprintf("%s: index %d, nvidia-smi says %d", s.UUID, c.Index, s.Index))
		case c.Model != s.Name:
			problems = append(problems, fmt.Sprintf("%s: model %q, nvidia-smi says %q", s.UUID, c.Model, s.Name))
		}
		if s.MemoryMiB > 0 && abs(c.MemoryMiB-s.MemoryMiB)*100 > s.MemoryMiB {
			problems = append(problems, fmt.Sprintf("%s: %d MiB, nvidia-smi says %d MiB", s.UUID, c.MemoryMiB, s.MemoryMiB))
		}
	}
	for _, c := range cards {
		if !listed[c.UUID] {
			problems = append(problems, fmt.Sprintf("the agent's card %d (%s) is not in nvidia-smi's list", c.Index, c.UUID))
		}
	}
	return problems
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

func runInventory(args []string, stdout io.Writer) (verdict, error) {
	fs := flag.NewFlagSet("inventory", flag.ContinueOnError)
	fs.SetOutput(stdout)
	list := fs.String("smi-list", "", "a file holding `nvidia-smi -L`'s output")
	csv := fs.String("smi-csv", "", "a file holding `nvidia-smi --query-gpu=index,uuid,memory.total --format=csv,noheader,nounits` (optional)")
	if err := fs.Parse(args); err != nil {
		return verdict{}, err
	}
	if *list == "" {
		return verdict{}, fmt.Errorf("%w: --smi-list is required", errUsage)
	}
	text, err := os.ReadFile(*list)
	if err != nil {
		return verdict{}, err
	}
	smi, err := parseSMIList(string(text))
	if err != nil {
		return verdict{}, err
	}
	if *csv != "" {
		text, err := os.ReadFile(*csv)
		if err != nil {
			return verdict{}, err
		}
		if err := addSMIMemory(smi, string(text)); err != nil {
			return verdict{}, err
		}
	}
	// The agent's own discovery (agent/nvml), on the real library.
	d, err := qnvml.Open(gonvml.New())
	if err != nil {
		return fail("the agent's NVML discovery failed: %v", err), nil
	}
	defer d.Close()
	cards, skipped := d.Cards(), d.Skipped()
	fmt.Fprintln(stdout, "| index | UUID | model | memory MiB | minor (/dev/nvidiaN) | healthy |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|")
	for _, c := range cards {
		minor, _ := d.Minor(c.UUID)
		fmt.Fprintf(stdout, "| %d | %s | %s | %d | %d | %v |\n", c.Index, c.UUID, c.Model, c.MemoryMiB, minor, c.Healthy)
	}
	for _, s := range skipped {
		fmt.Fprintf(stdout, "skipped card %d %s: %s\n", s.Index, s.UUID, s.Reason)
	}
	problems := compareInventory(cards, skipped, smi)
	for _, c := range cards {
		if err := d.Grantable(c.UUID); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return fail("%s", strings.Join(problems, "; ")), nil
	}
	return pass("%d cards, %d left out, as nvidia-smi lists them", len(cards), len(skipped)), nil
}
