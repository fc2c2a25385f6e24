// Package apiretry retries one API write a bounded number of times with an
// exponential backoff (k8s.io/apimachinery's wait), for the agent's writers
// that work off the kubelet's hot path (agent/grantwriter, agent/inventory).
package apiretry

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Base is the wait after a first failed write; it doubles per attempt.
// Tests shorten it.
var Base = 200 * time.Millisecond

// Do calls f up to attempts times, Base apart and doubling, and returns f's
// last error (ctx's if ctx ended before the first call). A NotFound answer
// ends the attempts at once: an object that is gone stays gone, and
// retrying would only hold up the writes queued behind it.
func Do(ctx context.Context, attempts int, f func() error) error {
	var err error
	backoff := wait.Backoff{Duration: Base, Factor: 2, Steps: attempts}
	waitErr := wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		err = f()
		return err == nil || apierrors.IsNotFound(err), nil
	})
	if err == nil {
		return waitErr
	}
	return err
}
