package podresources

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// What a failed List means decides what a caller may do without it. Only
// an API that is not there at all (Absent) lets the agent fall back to
// matching without the kubelet's list; a kubelet that is there but did not
// answer this once (Transient: its rate limit, a restart, a slow answer) is
// asked again, and if it still does not answer the caller must refuse:
// guessing from order alone is how one slice reaches two containers
// (agent/allocate/README.md, "When the kubelet does not answer").

// Absent reports whether err says this node serves no PodResources API:
// the socket is missing, or the kubelet does not implement List.
func Absent(err error) bool {
	return errors.Is(err, ErrUnavailable) || status.Code(err) == codes.Unimplemented
}

// Transient reports whether err is a refusal the same call may not get
// again soon: the kubelet's rate limit (ResourceExhausted: 100 calls a
// second, burst 10, pkg/kubelet/apis/podresources), a kubelet restarting
// or not yet listening (Unavailable), an answer slower than the call's
// deadline (DeadlineExceeded).
func Transient(err error) bool {
	switch status.Code(err) { // status.Code reads wrapped errors too
	case codes.ResourceExhausted, codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// DefaultBackoff is the wait before each repeat of a transient refusal:
// about 0.6 s in all, long enough for the kubelet's limiter (a token every
// 10 ms) to refill many times over, short against the kubelet's wait on
// an Allocate answer.
var DefaultBackoff = []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond,
	80 * time.Millisecond, 160 * time.Millisecond, 320 * time.Millisecond}

// Retrying asks Lister again after each transient refusal, waiting Backoff
// before each repeat (DefaultBackoff when nil). Any other error, the
// context's end, or a transient one after the last repeat is returned.
type Retrying struct {
	Lister  Lister
	Backoff []time.Duration
	// Sleep waits d or until ctx ends (tests make it instant).
	Sleep func(ctx context.Context, d time.Duration) error
}

// List implements Lister.
func (r Retrying) List(ctx context.Context) ([]*podresourcesapi.PodResources, error) {
	backoff := r.Backoff
	if backoff == nil {
		backoff = DefaultBackoff
	}
	sleep := r.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	for i := 0; ; i++ {
		list, err := r.Lister.List(ctx)
		if err == nil || !Transient(err) || ctx.Err() != nil {
			return list, err
		}
		if i == len(backoff) {
			return nil, fmt.Errorf("kubelet refused %d times: %w", i+1, err)
		}
		if serr := sleep(ctx, backoff[i]); serr != nil {
			return nil, fmt.Errorf("%w (while waiting to ask again after: %v)", serr, err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
