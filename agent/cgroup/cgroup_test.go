package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const uid = "0b7e3c1a-5d2f-4c8e-9a1b-2c3d4e5f6a7b"

func TestFreezeThawLayouts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version Version
		systemd bool
		qos     string
		wantRel string
	}{
		{"v2 systemd burstable", V2, true, "burstable", "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7e3c1a_5d2f_4c8e_9a1b_2c3d4e5f6a7b.slice"},
		{"v2 systemd guaranteed", V2, true, "", "kubepods.slice/kubepods-pod0b7e3c1a_5d2f_4c8e_9a1b_2c3d4e5f6a7b.slice"},
		{"v2 cgroupfs besteffort", V2, false, "besteffort", "kubepods/besteffort/pod" + uid},
		{"v1 cgroupfs guaranteed", V1, false, "", "freezer/kubepods/pod" + uid},
		{"v1 systemd burstable", V1, true, "burstable", "freezer/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7e3c1a_5d2f_4c8e_9a1b_2c3d4e5f6a7b.slice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := NewFakeTree(t.TempDir(), tc.version, tc.systemd)
			if err != nil {
				t.Fatal(err)
			}
			made, err := tree.AddPod(tc.qos, uid)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Detect(tree.CgroupRoot)
			if err != nil || f.Version != tc.version {
				t.Fatalf("Detect: %v %v", f, err)
			}
			dir, err := f.PodDir(uid)
			if err != nil || dir != made || dir != filepath.Join(tree.CgroupRoot, tc.wantRel) {
				t.Fatalf("PodDir = %q, %v; made %q", dir, err, made)
			}
			for _, want := range []bool{true, false, true} {
				op := f.Thaw
				if want {
					op = f.Freeze
				}
				if err := op(dir); err != nil {
					t.Fatal(err)
				}
				if got, err := f.Frozen(dir); err != nil || got != want {
					t.Errorf("Frozen = %v, %v; want %v", got, err, want)
				}
			}
			if err := tree.AddProc(42, tc.qos, uid); err != nil {
				t.Fatal(err)
			}
			if got, err := (Procs{Root: tree.ProcRoot}).PodUID(42); err != nil || got != uid {
				t.Errorf("PodUID = %q, %v", got, err)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	if _, err := Detect(t.TempDir()); !errors.Is(err, ErrNoFreezer) {
		t.Errorf("Detect on an empty dir: %v", err)
	}
	tree, _ := NewFakeTree(t.TempDir(), V2, true)
	f, _ := Detect(tree.CgroupRoot)
	if _, err := f.PodDir(uid); !errors.Is(err, ErrPodNotFound) {
		t.Errorf("PodDir of a missing pod: %v", err)
	}
	// A cgroup that vanished (pod deleted) must fail, not be created as a file.
	gone := filepath.Join(tree.CgroupRoot, "gone")
	os.Mkdir(gone, 0o755)
	if err := f.Freeze(gone); err == nil {
		t.Error("Freeze of a cgroup without cgroup.freeze succeeded")
	}
}

// TestProcsPodUID: /proc/<pid>/cgroup of v2, v1 and hybrid hosts, both
// cgroup drivers; a process outside pods has none; a file that is not a
// cgroup file is an error naming the pid.
func TestProcsPodUID(t *testing.T) {
	systemd := "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b7e3c1a_5d2f_4c8e_9a1b_2c3d4e5f6a7b.slice/cri-containerd-1.scope"
	cases := []struct {
		name, content, want, wantErr string
	}{
		{name: "v2 systemd", content: "0::" + systemd + "\n", want: uid},
		{name: "v1 cgroupfs", content: "12:freezer:/kubepods/burstable/pod" + uid + "/abc\n4:cpu,cpuacct:/kubepods/burstable/pod" + uid + "/abc\n", want: uid},
		{name: "hybrid", content: "12:freezer:/kubepods/burstable/pod" + uid + "/abc\n0::/\n", want: uid},
		{name: "not a pod", content: "0::/user.slice/user-0.slice/session-1.scope\n", want: ""},
		{name: "garbage", content: "garbage", wantErr: "pid 7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "7", "cgroup"), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Procs{Root: root}.PodUID(7)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := (Procs{Root: t.TempDir()}).PodUID(8); err == nil {
		t.Error("a pid without a cgroup file: no error")
	}
}

func FuzzPodUIDFromPath(f *testing.F) {
	f.Add("/kubepods/pod" + uid + "/x")
	f.Add("/kubepods.slice/kubepods-pod0b7e3c1a_5d2f_4c8e_9a1b_2c3d4e5f6a7b.slice")
	f.Fuzz(func(t *testing.T, s string) {
		if got := PodUIDFromPath(s); got != "" && (len(got) != 36 || strings.Contains(got, "_")) {
			t.Errorf("uid %q", got)
		}
	})
}

// TestFreezeDoesNotWait: Freeze writes the request and returns, on both
// hierarchies, while the kernel has not finished (v2 cgroup.events still
// "frozen 0", v1 freezer.state reading FREEZING); Frozen counts the
// standing request. A waiting freezer (opencontainers/cgroups') would block
// here until its timeout.
func TestFreezeDoesNotWait(t *testing.T) {
	for _, v := range []Version{V1, V2} {
		t.Run(v.String(), func(t *testing.T) {
			tree, err := NewFakeTree(t.TempDir(), v, true)
			if err != nil {
				t.Fatal(err)
			}
			dir, err := tree.AddPod("besteffort", uid)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Detect(tree.CgroupRoot)
			if err != nil {
				t.Fatal(err)
			}
			if v == V2 {
				if err := os.WriteFile(filepath.Join(dir, "cgroup.events"), []byte("populated 1\nfrozen 0\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.Freeze(dir); err != nil {
				t.Fatal(err)
			}
			file, want := "cgroup.freeze", "1"
			if v == V1 {
				file, want = "freezer.state", "FROZEN"
			}
			if b, _ := os.ReadFile(filepath.Join(dir, file)); string(b) != want {
				t.Errorf("%s = %q, want %q", file, b, want)
			}
			if v == V1 { // the kernel is still freezing
				if err := os.WriteFile(filepath.Join(dir, file), []byte("FREEZING\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if frozen, err := f.Frozen(dir); err != nil || !frozen {
				t.Errorf("Frozen = %v, %v; want the standing request counted", frozen, err)
			}
			if got, err := f.FrozenUnder(filepath.Dir(dir)); err != nil || len(got) != 1 || got[0] != dir {
				t.Errorf("FrozenUnder = %v, %v; want [%s]", got, err, dir)
			}
		})
	}
}
