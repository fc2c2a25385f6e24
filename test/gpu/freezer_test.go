package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qgpu-scheduler/qgpu/agent/cgroup"
)

// A scratch tree shaped like a cgroup v2 mount: the kernel's files are
// plain files here, made by the test where the kernel would make them.
func TestFreezerOnScratchTree(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := cgroup.Detect(root)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := createCgroup(f, "qgpu-gpucheck-offline", 4242)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); string(b) != strconv.Itoa(4242) {
		t.Errorf("cgroup.procs %q", b)
	}
	for _, name := range []string{"a/b", "..", ""} {
		if _, err := createCgroup(f, name, 1); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	for file, text := range map[string]string{"cgroup.freeze": "0", "cgroup.events": "populated 1\nfrozen 1\n"} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := freezeFor(f, dir, 50*time.Millisecond, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "freeze frozen_ms=") || strings.Contains(out.String(), "settled_ms=-1") {
		t.Errorf("freeze line %q", out.String())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.freeze")); string(b) != "0" {
		t.Errorf("left cgroup.freeze %q, want thawed", b)
	}
	for _, file := range []string{"cgroup.freeze", "cgroup.events", "cgroup.procs"} {
		os.Remove(filepath.Join(dir, file)) // the kernel's, gone with the directory
	}
	if err := removeCgroup(f, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
}
