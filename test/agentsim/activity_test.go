package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"

	"github.com/qgpu-scheduler/qgpu/agent"
	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
	"github.com/qgpu-scheduler/qgpu/agent/nvml"
	"github.com/qgpu-scheduler/qgpu/agent/store"
	"github.com/qgpu-scheduler/qgpu/cmd/qgpu-agent/app"
)

// TestSidecar: no file, no sidecar; the simulation refuses real NVML and
// the host's cgroup and proc roots; on fake cards and scratch roots it
// creates the fake cgroup tree before it returns (the priority controller
// looks for it next).
func TestSidecar(t *testing.T) {
	dir := t.TempDir()
	cards, _ := nvml.ParseFakeSpec("1xT4")
	fake := nvml.NewFake(cards, "n1", "")
	scratch := agent.Config{NVML: fake, CgroupRoot: filepath.Join(dir, "cgroup"), ProcRoot: filepath.Join(dir, "proc")}
	cases := []struct {
		name    string
		file    string
		cfg     agent.Config
		wantErr string // "" for none
		wantNil bool
	}{
		{name: "no file", cfg: scratch, wantNil: true},
		{name: "real NVML", file: "a", cfg: agent.Config{NVML: gonvml.New(), CgroupRoot: scratch.CgroupRoot, ProcRoot: scratch.ProcRoot}, wantErr: "needs --fake-cards"},
		{name: "host cgroup", file: "a", cfg: agent.Config{NVML: fake, CgroupRoot: "/sys/fs/cgroup", ProcRoot: scratch.ProcRoot}, wantErr: "is the host's"},
		{name: "host proc", file: "a", cfg: agent.Config{NVML: fake, CgroupRoot: scratch.CgroupRoot, ProcRoot: "/proc"}, wantErr: "is the host's"},
		{name: "scratch", file: filepath.Join(dir, "activity"), cfg: scratch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := activity{file: tc.file}
			sidecar, err := a.sidecar(&tc.cfg)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			case tc.wantNil:
				if sidecar != nil {
					t.Error("a sidecar without --fake-activity-file")
				}
				return
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			node := agent.NodeState{
				Grants: func() ([]store.Grant, error) { return nil, nil },
				Pods:   func() ([]*v1.Pod, error) { return nil, nil },
			}
			if err := sidecar(ctx, node); err != nil {
				t.Fatal(err)
			}
			if _, err := cgroup.Detect(tc.cfg.CgroupRoot); err != nil {
				t.Errorf("no fake cgroup tree after the sidecar started: %v", err)
			}
		})
	}
}

// TestMixedNodeArgsParse: the arguments the test harness gives the agent of
// a mixed node (test/harness simArgs) parse with this binary's flags.
func TestMixedNodeArgsParse(t *testing.T) {
	var a activity
	cmd := app.NewCommand(&bytes.Buffer{}, app.WithFlags("simulated activity (test build)", a.addFlags), app.WithSidecar(a.sidecar))
	args := []string{"--fake-cards=2xT4", "--dbfile=/tmp/r/meta.db", "--metrics-addr=127.0.0.1:0", "--kubeconfig=/tmp/r/kubeconfig",
		"--metrics-addr-file=/tmp/r/metrics-addr", "--fake-activity-file=/tmp/r/activity",
		"--cgroup-root=/tmp/r/fake-host/sys/fs/cgroup", "--proc-root=/tmp/r/fake-host/proc"}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	if a.file != "/tmp/r/activity" {
		t.Errorf("--fake-activity-file parsed as %q", a.file)
	}
}
