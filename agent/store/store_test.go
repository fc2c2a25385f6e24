package store

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

func grant(uid, container, resource string, ids ...string) Grant {
	return Grant{
		PodUID: uid, Namespace: "ns", Name: "pod-" + uid, Container: container, Resource: resource,
		DeviceIDs: ids, Amount: int64(len(ids)), Class: protocol.ClassGeneral,
		Slices:    []protocol.Slice{{Index: 1, UUID: "GPU-1", MemoryGiB: 4, Cores: 30}},
		GrantedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func TestRoundTripAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "meta.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	a := grant("a", "c", protocol.ResourceMemory, "m1", "m2")
	b := grant("b", "c", protocol.ResourceCore, "c1")
	for _, g := range []Grant{a, b} {
		if err := s.Put(g); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(a); !errors.Is(err, ErrExists) {
		t.Errorf("second Put: want ErrExists, got %v", err)
	}
	s.Close()

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	a.Version, b.Version = SchemaVersion, SchemaVersion
	if diff := cmp.Diff([]Grant{a, b}, got); diff != "" {
		t.Errorf("after reopen (-want +got):\n%s", diff)
	}
	if g, ok, err := s.ByDevices(protocol.ResourceMemory, []string{"m2", "m1"}); err != nil || !ok || g.PodUID != "a" {
		t.Errorf("ByDevices: %v %v %v", g, ok, err)
	}
	if _, ok, _ := s.ByDevices(protocol.ResourceCore, []string{"m2", "m1"}); ok {
		t.Errorf("ByDevices matched another resource")
	}
	if _, ok, _ := s.Get("b", "c", protocol.ResourceCore); !ok {
		t.Errorf("Get b: not found")
	}
}

func TestDeleteAndReplace(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Put(grant("a", "c1", protocol.ResourceMemory, "1"))
	s.Put(grant("a", "c2", protocol.ResourceMemory, "2"))
	s.Put(grant("ab", "c1", protocol.ResourceMemory, "3")) // shares the prefix "a"
	if n, err := s.DeletePod("a"); err != nil || n != 2 {
		t.Errorf("DeletePod: %d %v, want 2", n, err)
	}
	moved := grant("z", "c1", protocol.ResourceMemory, "3")
	if err := s.Replace([]string{Key("ab", "c1", protocol.ResourceMemory)}, []Grant{moved}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.List()
	if len(got) != 1 || got[0].PodUID != "z" {
		t.Errorf("after Replace: %+v", got)
	}
}

func TestSchemaVersionChecked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucketIfNotExists(bucketMeta)
		return b.Put(keySchema, []byte("99"))
	})
	db.Close()
	if _, err := Open(path); err == nil || !strings.Contains(err.Error(), "schema version") {
		t.Errorf("want a schema version error, got %v", err)
	}
}

// TestCheck: the health probes' store check passes on an open store and
// fails once it is closed.
func TestCheck(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err != nil {
		t.Errorf("Check on an open store: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err == nil {
		t.Error("Check on a closed store passed")
	}
}
