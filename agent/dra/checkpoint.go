package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CheckpointVersion is the checkpoint format this build writes. It reads
// version 1 too, whose claims record no Allocation.
const CheckpointVersion = 2

// Prepared is one claim the driver prepared: enough to answer the kubelet
// again with the same devices, to write its CDI specs again, and to undo
// it once the ResourceClaim is gone.
type Prepared struct {
	UID       types.UID         `json:"uid"`
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Requests  []PreparedRequest `json:"requests"`
	// Allocation is what it was prepared from (nil in a version-1 file).
	Allocation *Allocation `json:"allocation,omitempty"`
}

// PreparedRequest is one request of a prepared claim: its slices, the CDI
// device of the claim's own spec (ClaimCDIKind) holding its container
// edits, and the cards' devices in the node's CDI specs.
type PreparedRequest struct {
	Request
	// SpecDevice is the device name in the claim's spec (ClaimCDIKind).
	SpecDevice  string                 `json:"specDevice"`
	CardDevices []string               `json:"cardDevices"`
	Edits       cdispec.ContainerEdits `json:"edits"`
}

// Checkpoint is the file of prepared claims, written whole through a
// temporary file, fsync and rename: a crash leaves the old or the new file.
type Checkpoint struct {
	Path string
}

type checkpointFile struct {
	Version int        `json:"version"`
	Claims  []Prepared `json:"claims"`
}

// Load reads the checkpoint; a missing file is no claim prepared.
func (c Checkpoint) Load() (map[types.UID]Prepared, error) {
	raw, err := os.ReadFile(c.Path)
	if errors.Is(err, os.ErrNotExist) {
		return map[types.UID]Prepared{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the DRA checkpoint: %w", err)
	}
	var f checkpointFile
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("DRA checkpoint %s: %w", c.Path, err)
	}
	if f.Version != 1 && f.Version != CheckpointVersion {
		return nil, fmt.Errorf("DRA checkpoint %s: version %d, this build reads 1 and %d", c.Path, f.Version, CheckpointVersion)
	}
	out := make(map[types.UID]Prepared, len(f.Claims))
	for i, p := range f.Claims {
		if p.UID == "" {
			return nil, fmt.Errorf("DRA checkpoint %s: claims[%d].uid: empty", c.Path, i)
		}
		out[p.UID] = p
	}
	return out, nil
}

// Save replaces the checkpoint with claims.
func (c Checkpoint) Save(claims map[types.UID]Prepared) error {
	f := checkpointFile{Version: CheckpointVersion, Claims: make([]Prepared, 0, len(claims))}
	for _, p := range claims {
		f.Claims = append(f.Claims, p)
	}
	slices.SortFunc(f.Claims, func(a, b Prepared) int { return strings.Compare(string(a.UID), string(b.UID)) })
	raw, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the DRA checkpoint: %w", err)
	}
	return writeAtomic(c.Path, raw)
}

// writeAtomic writes data to path through a temporary file in the same
// directory, synced before the rename and the directory after it.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating the DRA checkpoint directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing the DRA checkpoint: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename: already gone
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the DRA checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("syncing the DRA checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the DRA checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing the DRA checkpoint: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename's durability; not every file system supports it
		d.Close()
	}
	return nil
}
