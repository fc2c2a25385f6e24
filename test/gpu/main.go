// Command qgpu-gpucheck is the Go half of the real-card check (make
// gpu-check, docs/real-card.md): built here, carried to a lent GPU machine
// (which has no Go) in the payload, and called by run.sh there. Each
// subcommand runs the agent's own code against the real driver, the real
// HAMi-core library or the files it writes, or judges what the CUDA
// programs beside it printed.
//
//	qgpu-gpucheck inventory --smi-list F [--smi-csv F]      the agent's NVML discovery against nvidia-smi
//	qgpu-gpucheck cdi --out F [--compare F]                  the agent's card CDI spec against nvidia-ctk's
//	qgpu-gpucheck hami-slice --uuid U --root D ...           the hami-core backend's env and mounts for a slice
//	qgpu-gpucheck region --path F [--uuid U --sm-limit N --pid P]  read a region the real library wrote
//	qgpu-gpucheck block --path F --hold D                    block and release a region as the priority controller does
//	qgpu-gpucheck freezer create|freeze|remove ...           the agent's cgroup freezer on a process
//	qgpu-gpucheck judge memcap|compute|block|colocation ...  pass or fail from the CUDA programs' output
//
// Every subcommand that decides prints one `verdict PASS|FAIL <why>` line
// last and exits 0 on PASS, 1 on FAIL, 2 when it could not run.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// errUsage marks a command line the subcommand cannot run (exit 2).
var errUsage = errors.New("usage")

type subcommand func(args []string, stdout io.Writer) (verdict, error)

var subcommands = map[string]subcommand{
	"inventory":  runInventory,
	"cdi":        runCDI,
	"hami-slice": runHAMiSlice,
	"region":     runRegion,
	"block":      runBlock,
	"freezer":    runFreezer,
	"judge":      runJudge,
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || subcommands[args[0]] == nil {
		names := make([]string, 0, len(subcommands))
		for n := range subcommands {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(stderr, "usage: qgpu-gpucheck <%s> [flags] (docs/real-card.md)\n", strings.Join(names, "|"))
		return 2
	}
	v, err := subcommands[args[0]](args[1:], stdout)
	if err != nil {
		fmt.Fprintf(stderr, "qgpu-gpucheck %s: %v\n", args[0], err)
		return 2
	}
	if v.decided {
		fmt.Fprintln(stdout, v)
		if !v.pass {
			return 1
		}
	}
	return 0
}

// verdict is a subcommand's decision; the zero value decides nothing (a
// subcommand that only prints).
type verdict struct {
	decided bool
	pass    bool
	why     string
}

func pass(format string, a ...any) verdict {
	return verdict{decided: true, pass: true, why: fmt.Sprintf(format, a...)}
}

func fail(format string, a ...any) verdict {
	return verdict{decided: true, why: fmt.Sprintf(format, a...)}
}

func (v verdict) String() string {
	word := "FAIL"
	if v.pass {
		word = "PASS"
	}
	return "verdict " + word + " " + v.why
}
