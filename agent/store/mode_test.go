package store

import (
	"os"
	"path/filepath"
	"testing"
)

// The store names every pod's devices: owner-only, also when the file
// was left group- or world-readable by an older version or an operator.
func TestOwnerOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qgpu")
	for _, pre := range []os.FileMode{0, 0o644} {
		path := filepath.Join(dir, "meta.db")
		if pre != 0 {
			if err := os.WriteFile(path+".loose", nil, pre); err != nil {
				t.Fatal(err)
			}
			path += ".loose"
		}
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("store (pre-existing mode %v): mode %v, err %v; want 0600", pre, fi.Mode().Perm(), err)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("new store directory: mode %v, err %v; want 0700", fi.Mode().Perm(), err)
	}
}
