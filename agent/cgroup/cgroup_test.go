package cgroup

import (
	"errors"
	"os"
	"path/filepath"
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

func TestPodUIDFromCgroupFile(t *testing.T) {
	for content, want := range map[string]string{
		"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b7e3c1a_5d2f_4c8e_9a1b_2c3d4e5f6a7b.slice/cri-containerd-1.scope\n": uid,
		"12:freezer:/kubepods/burstable/pod" + uid + "/abc\n": uid,
		"0::/user.slice/user-0.slice/session-1.scope\n":       "",
		"garbage": "",
	} {
		if got := PodUIDFromCgroupFile(content); got != want {
			t.Errorf("%q: got %q, want %q", content, got, want)
		}
	}
}

func FuzzPodUIDFromCgroupFile(f *testing.F) {
	f.Add("0::/kubepods/pod" + uid + "/x")
	f.Fuzz(func(t *testing.T, s string) {
		if got := PodUIDFromCgroupFile(s); got != "" && len(got) != 36 {
			t.Errorf("uid %q", got)
		}
	})
}
