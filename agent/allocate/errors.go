package allocate

import "errors"

// ErrNoMatch is wrapped by the error of an Allocate call that matches no container.
var ErrNoMatch = errors.New("no matching container")

// ErrBadRequest is wrapped when the kubelet's request itself is unusable.
var ErrBadRequest = errors.New("bad Allocate request")

type noMatch struct{ msg string }

func (e *noMatch) Error() string { return e.msg }
func (e *noMatch) Unwrap() error { return ErrNoMatch }

// ErrAmbiguous is wrapped when two containers with different answers can be
// the one a call is for.
var ErrAmbiguous = errors.New("ambiguous Allocate call")

// ErrStoreUnreadable is wrapped when the grant records cannot be read: the
// call is refused rather than risk handing a container out twice.
var ErrStoreUnreadable = errors.New("grant store unreadable")

// ErrCardNotGrantable is wrapped when a card of the grant must not be handed
// out now: unhealthy, in MIG mode, or not this node's.
var ErrCardNotGrantable = errors.New("card not grantable")
