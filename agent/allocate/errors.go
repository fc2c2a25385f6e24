package allocate

import "errors"

// ErrNoMatch is wrapped by the error of an Allocate call that matches no container.
var ErrNoMatch = errors.New("no matching container")

// ErrBadRequest is wrapped when the kubelet's request itself is unusable.
var ErrBadRequest = errors.New("bad Allocate request")

type noMatch struct{ msg string }

func (e *noMatch) Error() string { return e.msg }
func (e *noMatch) Unwrap() error { return ErrNoMatch }
