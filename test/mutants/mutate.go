package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// mutate returns src with m.Old replaced by m.New, and the line of the
// change. Old must occur exactly once: text found twice could break another
// line than the one the entry describes, text not found means the code
// moved on without the list.
func mutate(src []byte, m mutant) ([]byte, int, error) {
	if m.Old == "" {
		return nil, 0, fmt.Errorf("empty original text")
	}
	if n := bytes.Count(src, []byte(m.Old)); n != 1 {
		return nil, 0, fmt.Errorf("original text found %d times, want once: %q", n, m.Old)
	}
	at := bytes.Index(src, []byte(m.Old))
	line := 1 + bytes.Count(src[:at], []byte("\n"))
	return bytes.Replace(src, []byte(m.Old), []byte(m.New), 1), line, nil
}

// writeOverlay writes the mutated file i and an overlay that puts it in
// place of the original path, and returns the overlay's path.
func writeOverlay(scratch string, i int, path string, mutated []byte) (string, error) {
	file := filepath.Join(scratch, fmt.Sprintf("m%03d_%s", i, filepath.Base(path)))
	if err := os.WriteFile(file, mutated, 0o644); err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]map[string]string{"Replace": {path: file}})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(scratch, fmt.Sprintf("m%03d.json", i))
	return overlay, os.WriteFile(overlay, b, 0o644)
}
