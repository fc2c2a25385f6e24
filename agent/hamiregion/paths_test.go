package hamiregion

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestContainerDir(t *testing.T) {
	tests := []struct {
		uid, ctr string
		want     string // "": refused
	}{
		{"0b7e3c1a-5d2f-4c8e-9a1b-2c3d4e5f6a7b", "main", "/r/0b7e3c1a-5d2f-4c8e-9a1b-2c3d4e5f6a7b_main"},
		{"uid", "side-car", "/r/uid_side-car"},
		{"", "main", ""},
		{"uid", "", ""},
		{"a_b", "main", ""},
		{"uid", "x_y", ""},
		{"uid", "../escape", ""},
		{"..", "main", ""},
		{"uid", ".", ""},
	}
	for _, tc := range tests {
		got, err := ContainerDir("/r", tc.uid, tc.ctr)
		if (tc.want == "") != (err != nil) || got != tc.want {
			t.Errorf("ContainerDir(%q, %q) = %q, %v; want %q", tc.uid, tc.ctr, got, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "_") {
			t.Errorf("error does not say what is refused: %v", err)
		}
		if tc.want == "" {
			continue
		}
		uid, ctr, ok := ParseContainerDir(filepath.Base(got))
		if !ok || uid != tc.uid || ctr != tc.ctr {
			t.Errorf("ParseContainerDir(%q) = %q, %q, %v", filepath.Base(got), uid, ctr, ok)
		}
	}
	if p, _ := RegionPath("/r", "uid", "main"); p != "/r/uid_main/cudevshr.cache" {
		t.Errorf("RegionPath = %q", p)
	}
}

func TestPrepareContainerDir(t *testing.T) {
	root := filepath.Join(t.TempDir(), "regions")
	dir, err := PrepareContainerDir(root, "uid", "main")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("%s: %v %v, want mode 0777", dir, fi.Mode(), err)
	}
	region := filepath.Join(dir, FileName)
	if err := os.WriteFile(region, []byte("kept"), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareContainerDir(root, "uid", "main"); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(region); string(data) != "kept" {
		t.Errorf("preparing again lost the region: %q", data)
	}
	if err := os.WriteFile(filepath.Join(root, "uid_file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareContainerDir(root, "uid", "file"); err == nil {
		t.Error("a file in the directory's place: no error")
	}
}

func FuzzParseContainerDir(f *testing.F) {
	for _, s := range []string{"uid_main", "a_b_c", "_x", "x_", "../_x", "ld.so.preload"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		uid, ctr, ok := ParseContainerDir(name)
		if !ok {
			return
		}
		dir, err := ContainerDir("/r", uid, ctr)
		if err != nil || filepath.Dir(dir) != "/r" || filepath.Base(dir) != name {
			t.Errorf("%q parsed to %q, %q, which give %q, %v", name, uid, ctr, dir, err)
		}
	})
}
