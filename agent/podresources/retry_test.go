package podresources

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// scripted answers List with errs in turn, then with a list.
type scripted struct {
	errs  []error
	calls int
}

func (s *scripted) List(context.Context) ([]*podresourcesapi.PodResources, error) {
	s.calls++
	if s.calls <= len(s.errs) && s.errs[s.calls-1] != nil {
		return nil, s.errs[s.calls-1]
	}
	return []*podresourcesapi.PodResources{{Namespace: "default", Name: "p"}}, nil
}

func wrapped(c codes.Code) error {
	return fmt.Errorf("listing pod resources: %w", status.Error(c, "kubelet says no"))
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err               error
		absent, transient bool
	}{
		{fmt.Errorf("%w: stat: no such file", ErrUnavailable), true, false},
		{wrapped(codes.Unimplemented), true, false},
		{wrapped(codes.ResourceExhausted), false, true},
		{wrapped(codes.Unavailable), false, true},
		{wrapped(codes.DeadlineExceeded), false, true},
		{wrapped(codes.Canceled), false, false},
		{wrapped(codes.Internal), false, false},
		{errors.New("something else"), false, false},
	} {
		if got := Absent(tc.err); got != tc.absent {
			t.Errorf("Absent(%v) = %v, want %v", tc.err, got, tc.absent)
		}
		if got := Transient(tc.err); got != tc.transient {
			t.Errorf("Transient(%v) = %v, want %v", tc.err, got, tc.transient)
		}
	}
}

func TestRetrying(t *testing.T) {
	exhausted := wrapped(codes.ResourceExhausted)
	for _, tc := range []struct {
		name      string
		errs      []error
		wantErr   bool
		wantCalls int
	}{
		{"answers at once", nil, false, 1},
		{"rate-limited twice, then answers", []error{exhausted, wrapped(codes.Unavailable)}, false, 3},
		{"rate-limited every time", []error{exhausted, exhausted, exhausted, exhausted}, true, 3},
		{"a definite error is not repeated", []error{wrapped(codes.Internal)}, true, 1},
		{"absent is not repeated", []error{ErrUnavailable}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scripted{errs: tc.errs}
			var waited []time.Duration
			r := Retrying{Lister: s, Backoff: []time.Duration{time.Millisecond, 2 * time.Millisecond},
				Sleep: func(_ context.Context, d time.Duration) error { waited = append(waited, d); return nil }}
			list, err := r.List(context.Background())
			if (err != nil) != tc.wantErr || (err == nil && len(list) != 1) {
				t.Fatalf("List = %v, %v; want error %v", list, err, tc.wantErr)
			}
			if s.calls != tc.wantCalls || len(waited) != tc.wantCalls-1 {
				t.Errorf("%d calls, %d waits; want %d calls", s.calls, len(waited), tc.wantCalls)
			}
			if tc.wantErr && tc.wantCalls > 1 && !Transient(err) {
				t.Errorf("the last refusal %v no longer reads as transient", err)
			}
		})
	}
}

// A context that ends while waiting stops the repeats.
func TestRetryingStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &scripted{errs: []error{wrapped(codes.ResourceExhausted), wrapped(codes.ResourceExhausted)}}
	r := Retrying{Lister: s, Sleep: func(ctx context.Context, _ time.Duration) error { cancel(); return ctx.Err() }}
	if _, err := r.List(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if s.calls != 1 {
		t.Errorf("%d calls after the context ended, want 1", s.calls)
	}
}
