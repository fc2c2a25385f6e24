package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestKubeletRoot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		k       Kubelet
		systemd bool
		qos     string
		want    string
	}{
		{"default cgroupfs", Kubelet{}, false, "besteffort", "kubepods/besteffort/pod" + uid},
		{"cgroupfs root", Kubelet{CgroupRoot: "/custom/pods"}, false, "", "custom/pods/kubepods/pod" + uid},
		{"systemd root as slice", Kubelet{CgroupRoot: "/custom.slice"}, true, "burstable",
			"custom.slice/custom-kubepods.slice/custom-kubepods-burstable.slice/custom-kubepods-burstable-pod0b7e3c1a_5d2f_4c8e_9a1b_2c3d4e5f6a7b.slice"},
		{"systemd nested slice", Kubelet{CgroupRoot: "/a.slice/a-b.slice"}, true, "",
			"a.slice/a-b.slice/a-b-kubepods.slice/a-b-kubepods-pod0b7e3c1a_5d2f_4c8e_9a1b_2c3d4e5f6a7b.slice"},
		// The kubelet escapes "-" in every name, not only the UID's
		// (CgroupName.ToSystemd): a root name's dash is not a new slice level.
		{"systemd root name with a dash", Kubelet{CgroupRoot: "/my-pods"}, true, "besteffort",
			"my_pods.slice/my_pods-kubepods.slice/my_pods-kubepods-besteffort.slice/my_pods-kubepods-besteffort-pod0b7e3c1a_5d2f_4c8e_9a1b_2c3d4e5f6a7b.slice"},
		{"cgroupfs root name with a dash", Kubelet{CgroupRoot: "/my-pods"}, false, "besteffort",
			"my-pods/kubepods/besteffort/pod" + uid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := tc.k.podPath(tc.qos, uid, tc.systemd); err != nil || got != tc.want {
				t.Errorf("podPath = %s, %v; want %s", got, err, tc.want)
			}
			// End to end: a fake kubelet with that root, the freezer finds the pod.
			tree, err := NewFakeTree(t.TempDir(), V2, tc.systemd)
			if err != nil {
				t.Fatal(err)
			}
			tree.Kubelet = tc.k
			made, _ := tree.AddPod(tc.qos, uid)
			f := &Freezer{Root: tree.CgroupRoot, Version: V2, Kubelet: tc.k}
			if dir, err := f.PodDir(uid); err != nil || dir != made {
				t.Errorf("PodDir = %s, %v; want %s", dir, err, made)
			}
			// The default root does not find a pod under a custom one.
			if tc.k.CgroupRoot != "" {
				if _, err := (&Freezer{Root: tree.CgroupRoot, Version: V2}).PodDir(uid); !errors.Is(err, ErrPodNotFound) {
					t.Errorf("default root found the pod: %v", err)
				}
			}
		})
	}
}

func TestReadKubeletConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		want          Kubelet
		wantErr       string
	}{
		{"systemd with root", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\ncgroupRoot: /custom.slice\n",
			Kubelet{CgroupRoot: "/custom.slice", Driver: DriverSystemd}, ""},
		{"defaults", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n", Kubelet{Driver: DriverCgroupfs}, ""},
		{"bad driver", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: upstart\n", Kubelet{}, `kubelet cgroup driver "upstart"`},
		// The kubelet refuses a file without its group and version; so does the agent.
		{"no apiVersion", "kind: KubeletConfiguration\ncgroupDriver: systemd\n", Kubelet{}, `want kubelet.config.k8s.io/v1beta1 KubeletConfiguration`},
		{"relative root", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupRoot: pods\n", Kubelet{}, `kubelet cgroup root "pods"`},
		{"not a kubelet config", "kind: Pod\n", Kubelet{}, `kind "Pod"`},
		{"not yaml", "\t:::", Kubelet{}, "kubelet configuration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			os.WriteFile(p, []byte(tc.content), 0o644)
			got, err := ReadKubeletConfig(p)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Error(d)
			}
		})
	}
}

// TestContainersAndKill: only the offline container is frozen, the sidecar
// never; a pod with a frozen container cannot be killed on v1 until it is
// thawed, and can on v2; FrozenUnder finds what was left frozen.
func TestContainersAndKill(t *testing.T) {
	for _, l := range []struct {
		v       Version
		systemd bool
	}{{V1, false}, {V1, true}, {V2, true}, {V2, false}} {
		t.Run(l.v.String(), func(t *testing.T) {
			tree, _ := NewFakeTree(t.TempDir(), l.v, l.systemd)
			pod, _ := tree.AddPod("besteffort", uid)
			gpu, _ := tree.AddContainer("besteffort", uid, "aaa111")
			side, _ := tree.AddContainer("besteffort", uid, "bbb222")
			f := &Freezer{Root: tree.CgroupRoot, Version: l.v}
			dir, err := f.ContainerDir(pod, "containerd://aaa111")
			if err != nil || dir != gpu {
				t.Fatalf("ContainerDir = %s, %v; want %s", dir, err, gpu)
			}
			if _, err := f.ContainerDir(pod, "containerd://ccc333"); !errors.Is(err, ErrContainerNotFound) {
				t.Errorf("missing container: %v", err)
			}
			if _, err := f.ContainerDir(pod, "containerd://../x"); err == nil {
				t.Error("a path as container ID was accepted")
			}
			if err := f.Freeze(gpu); err != nil {
				t.Fatal(err)
			}
			if frozen, _ := f.Frozen(side); frozen {
				t.Error("the sidecar is frozen")
			}
			left, err := f.FrozenUnder(pod)
			if err != nil || !cmp.Equal(left, []string{gpu}) {
				t.Errorf("FrozenUnder = %v, %v", left, err)
			}
			err = tree.KillPod("besteffort", uid)
			if l.v == V1 {
				if !errors.Is(err, ErrFrozenTasks) {
					t.Fatalf("v1 kill of a frozen pod: %v", err)
				}
				f.Thaw(gpu)
				err = tree.KillPod("besteffort", uid)
			}
			if err != nil {
				t.Fatalf("kill after thaw: %v", err)
			}
			if _, err := os.Stat(pod); !errors.Is(err, os.ErrNotExist) {
				t.Error("pod cgroup still there")
			}
		})
	}
}

// TestKubeletValidate: a root systemd cannot name as a slice is refused for
// the systemd driver, naming the root; the cgroupfs driver takes it, and
// with both drivers tried only the cgroupfs candidates remain.
func TestKubeletValidate(t *testing.T) {
	for _, tc := range []struct {
		k       Kubelet
		wantErr string
	}{
		{Kubelet{CgroupRoot: "/a//b", Driver: DriverSystemd}, `kubelet cgroup root "/a//b" with the systemd driver: invalid slice name`},
		{Kubelet{CgroupRoot: "/-.slice", Driver: DriverSystemd}, `kubelet cgroup root "/-.slice"`},
		{Kubelet{CgroupRoot: "/a//b", Driver: DriverCgroupfs}, ""},
		{Kubelet{CgroupRoot: "/a.slice/a-b.slice", Driver: DriverSystemd}, ""},
		{Kubelet{CgroupRoot: "pods"}, `kubelet cgroup root "pods": must be absolute`},
		{Kubelet{Driver: "upstart"}, `kubelet cgroup driver "upstart"`},
	} {
		err := tc.k.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: Validate = %v, want %q", tc.k, err, tc.wantErr)
		}
	}
	got := Kubelet{CgroupRoot: "/a//b"}.PodDirCandidates(uid)
	want := []string{"a/b/kubepods/pod" + uid, "a/b/kubepods/burstable/pod" + uid, "a/b/kubepods/besteffort/pod" + uid}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("candidates of an unnameable systemd root (-want +got):\n%s", diff)
	}
}
