// Package store keeps what the agent handed out (device IDs → pod, container,
// card) in a bbolt file, so that a restarted agent neither hands a container
// out twice nor forgets the grants the kubelet already holds.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qgpu-scheduler/qgpu/config/protocol"
)

// SchemaVersion is the record format this build reads and writes.
const SchemaVersion = 1

var (
	bucketGrants = []byte("grants")
	bucketMeta   = []byte("meta")
	keySchema    = []byte("schema")
)

// ErrExists is returned by Put when the container already holds a grant for the resource.
var ErrExists = errors.New("grant already recorded")

// Grant is one Allocate answer: the devices of one resource handed to one container.
type Grant struct {
	Version   int    `json:"version"`
	PodUID    string `json:"podUID"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Container string `json:"container"`
	Resource  string `json:"resource"`
	// Requested is the resource the kubelet asked for when it is not
	// Resource: a vocabulary's (vcuda-core, nvidia.com/gpu, …), whose one
	// call is recorded as the container's memory and core grants. The
	// kubelet lists the devices under this name.
	Requested string           `json:"requested,omitempty"`
	DeviceIDs []string         `json:"deviceIDs"`
	Amount    int64            `json:"amount"`
	Class     protocol.Class   `json:"class"`
	Slices    []protocol.Slice `json:"slices"`
	GrantedAt time.Time        `json:"grantedAt"`
}

// Key identifies a grant: one per (pod, container, resource).
func Key(podUID, container, resource string) string {
	return podUID + "/" + container + "/" + resource
}

// Key returns the grant's key.
func (g Grant) Key() string { return Key(g.PodUID, g.Container, g.Resource) }

// KubeletResource is the resource the kubelet lists the grant's devices under.
func (g Grant) KubeletResource() string {
	if g.Requested != "" {
		return g.Requested
	}
	return g.Resource
}

// Store is a bbolt file of grants; bbolt serialises writers, and every change
// is one transaction, so a crash leaves either the old or the new state.
type Store struct {
	db *bolt.DB
}

// Open opens (creating) the store at path; the file is owner-only.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the store directory: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	// bbolt's mode applies to a new file only: tighten one left looser.
	if err := os.Chmod(path, 0o600); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	if err := db.Update(initBuckets); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	return &Store{db: db}, nil
}

func initBuckets(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	if _, err := tx.CreateBucketIfNotExists(bucketGrants); err != nil {
		return err
	}
	if v := meta.Get(keySchema); v != nil {
		n, err := strconv.Atoi(string(v))
		if err != nil || n != SchemaVersion {
			return fmt.Errorf("schema version %q, this build reads %d", v, SchemaVersion)
		}
		return nil
	}
	return meta.Put(keySchema, []byte(strconv.Itoa(SchemaVersion)))
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// Check reads the grants bucket in a read transaction: it fails once the
// store is closed, and hangs only if the file does (the health probes bound it).
func (s *Store) Check() error {
	return s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketGrants) == nil {
			return errors.New("store has no grants bucket")
		}
		return nil
	})
}

// Put records g; it fails with ErrExists if its key is taken.
func (s *Store) Put(g Grant) error {
	g.Version = SchemaVersion
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketGrants)
		if b.Get([]byte(g.Key())) != nil {
			return fmt.Errorf("%w: %s", ErrExists, g.Key())
		}
		return put(b, g)
	})
}

func put(b *bolt.Bucket, g Grant) error {
	data, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return b.Put([]byte(g.Key()), data)
}

// List returns all grants, ordered by key.
func (s *Store) List() ([]Grant, error) {
	var out []Grant
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketGrants).ForEach(func(k, v []byte) error {
			var g Grant
			if err := json.Unmarshal(v, &g); err != nil {
				return fmt.Errorf("record %s: %w", k, err)
			}
			if g.Version != SchemaVersion {
				return fmt.Errorf("record %s: version %d, this build reads %d", k, g.Version, SchemaVersion)
			}
			out = append(out, g)
			return nil
		})
	})
	return out, err
}

// Get returns the grant of (pod, container, resource).
func (s *Store) Get(podUID, container, resource string) (Grant, bool, error) {
	var g Grant
	var found bool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketGrants).Get([]byte(Key(podUID, container, resource)))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &g)
	})
	return g, found, err
}

// ByDevices returns the grant of resource whose device IDs are exactly ids (any order).
func (s *Store) ByDevices(resource string, ids []string) (Grant, bool, error) {
	all, err := s.List()
	if err != nil {
		return Grant{}, false, err
	}
	want := sortedCopy(ids)
	for _, g := range all {
		if g.Resource == resource && slices.Equal(sortedCopy(g.DeviceIDs), want) {
			return g, true, nil
		}
	}
	return Grant{}, false, nil
}

func sortedCopy(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// DeletePod removes every grant of the pod and returns how many it removed.
func (s *Store) DeletePod(podUID string) (int, error) {
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketGrants)
		prefix := []byte(podUID + "/")
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, _ = c.Seek(prefix) {
			if err := b.Delete(k); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

func hasPrefix(k, prefix []byte) bool {
	return len(k) >= len(prefix) && string(k[:len(prefix)]) == string(prefix)
}

// Replace deletes the grants with keys del and writes put, in one transaction
// (the reconciler uses it to move grants to the container the kubelet really
// gave the devices to).
func (s *Store) Replace(del []string, puts []Grant) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketGrants)
		for _, k := range del {
			if err := b.Delete([]byte(k)); err != nil {
				return err
			}
		}
		for _, g := range puts {
			g.Version = SchemaVersion
			if err := put(b, g); err != nil {
				return err
			}
		}
		return nil
	})
}
