package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxAnnotationBytes bounds what the decoders read: a node with eight cards
// needs about 1 KiB, so anything near this size is hostile or broken.
const MaxAnnotationBytes = 64 << 10

// ErrTooLarge is returned for input over MaxAnnotationBytes.
var ErrTooLarge = errors.New("annotation too large")

// decodeStrict decodes exactly one JSON value into v, rejecting unknown
// fields, trailing data and oversized input.
func decodeStrict(data []byte, v any) error {
	if len(data) > MaxAnnotationBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxAnnotationBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("decoding JSON: trailing data after the object")
	}
	return nil
}
