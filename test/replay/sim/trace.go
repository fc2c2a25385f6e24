// Package sim replays the Alibaba openb GPU trace the way the FGD paper's
// simulator did (seeded shuffle, re-sampling up to 130% of the cluster's GPU
// capacity, no departures, CPU and memory as hard filters), placing every pod
// with the scheduler plugin's own placement and scoring code.
package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Node is one row of openb_node_list_gpu_node.csv.
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	GPUs      int
	Model     string
}

// Pod is one row of openb_pod_list_*.csv.
type Pod struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	NumGPU    int
	// GPUMilli is the share of each card (1000: a whole card).
	GPUMilli int64
	// Models are the allowed card models (gpu_spec), empty for any.
	Models []string
}

// GPUDemand is the pod's GPU demand in milli-cards.
func (p *Pod) GPUDemand() int64 { return int64(p.NumGPU) * p.GPUMilli }

// ReadNodes reads a node list CSV.
func ReadNodes(path string) ([]Node, error) {
	var out []Node
	err := readCSV(path, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}, func(r []string) error {
		n := Node{Name: r[0], Model: r[4]}
		var gpus int64
		err := ints(r[1:4], &n.CPUMilli, &n.MemoryMiB, &gpus)
		n.GPUs = int(gpus)
		out = append(out, n)
		return err
	})
	return out, err
}

// podColumns are the pod list columns the replay reads; gpu_spec is
// optional (the multigpu lists have only the first five).
var podColumns = []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}

// ReadPods reads a pod list CSV of any of the trace's variants: the header
// must start with the five resource columns; a gpu_spec column, wherever it
// is, gives the allowed models.
func ReadPods(path string) ([]Pod, error) {
	var out []Pod
	spec := -1
	err := readCSVHeader(path, podColumns, func(header []string) {
		spec = slices.Index(header, "gpu_spec")
	}, func(r []string) error {
		p := Pod{Name: r[0]}
		var num int64
		err := ints(r[1:5], &p.CPUMilli, &p.MemoryMiB, &num, &p.GPUMilli)
		p.NumGPU = int(num)
		if err == nil {
			err = checkPod(&p)
		}
		if spec >= 0 && spec < len(r) {
			if s := strings.TrimSpace(r[spec]); s != "" && s != "nan" {
				p.Models = strings.Split(s, "|")
			}
		}
		out = append(out, p)
		return err
	})
	return out, err
}

// checkPod refuses what the replay cannot place: negative amounts, a share
// above a card, or a share of a card spread over several cards.
func checkPod(p *Pod) error {
	switch {
	case p.CPUMilli < 0 || p.MemoryMiB < 0 || p.NumGPU < 0:
		return fmt.Errorf("pod %s: negative cpu_milli, memory_mib or num_gpu", p.Name)
	case p.GPUMilli < 0 || p.GPUMilli > 1000:
		return fmt.Errorf("pod %s: gpu_milli %d, want 0..1000", p.Name, p.GPUMilli)
	case p.NumGPU > 1 && p.GPUMilli != 1000:
		return fmt.Errorf("pod %s: num_gpu %d with gpu_milli %d: several cards are whole cards (1000)", p.Name, p.NumGPU, p.GPUMilli)
	case (p.NumGPU == 0) != (p.GPUMilli == 0):
		return fmt.Errorf("pod %s: num_gpu %d with gpu_milli %d: both or neither", p.Name, p.NumGPU, p.GPUMilli)
	}
	return nil
}

// readCSV checks that the header starts with want and calls row for each record.
func readCSV(path string, want []string, row func([]string) error) error {
	return readCSVHeader(path, want, func([]string) {}, row)
}

// readCSVHeader is readCSV that also hands the header to header first.
func readCSVHeader(path string, want []string, header func([]string), row func([]string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	h, err := r.Read()
	if err != nil {
		return fmt.Errorf("%s: reading header: %w", path, err)
	}
	if len(h) < len(want) || strings.Join(h[:len(want)], ",") != strings.Join(want, ",") {
		return fmt.Errorf("%s: header %v, want it to start with %v", path, h, want)
	}
	header(h)
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err == nil && len(rec) < len(want) {
			err = fmt.Errorf("%d fields, want %d", len(rec), len(want))
		}
		if err == nil {
			err = row(rec)
		}
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, line, err)
		}
	}
}

func ints(fields []string, dst ...*int64) error {
	for i, f := range fields {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return fmt.Errorf("field %d: %w", i+1, err)
		}
		*dst[i] = v
	}
	return nil
}
