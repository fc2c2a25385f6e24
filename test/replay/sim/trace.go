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

// ReadPods reads a pod list CSV.
func ReadPods(path string) ([]Pod, error) {
	var out []Pod
	err := readCSV(path, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"}, func(r []string) error {
		p := Pod{Name: r[0]}
		var num int64
		err := ints(r[1:5], &p.CPUMilli, &p.MemoryMiB, &num, &p.GPUMilli)
		p.NumGPU = int(num)
		if spec := strings.TrimSpace(r[5]); spec != "" && spec != "nan" {
			p.Models = strings.Split(spec, "|")
		}
		out = append(out, p)
		return err
	})
	return out, err
}

// readCSV checks that the header starts with want and calls row for each record.
func readCSV(path string, want []string, row func([]string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return fmt.Errorf("%s: reading header: %w", path, err)
	}
	if len(header) < len(want) || strings.Join(header[:len(want)], ",") != strings.Join(want, ",") {
		return fmt.Errorf("%s: header %v, want it to start with %v", path, header, want)
	}
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
