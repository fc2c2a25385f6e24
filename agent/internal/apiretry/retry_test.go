package apiretry

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDo(t *testing.T) {
	old := Base
	Base = time.Millisecond
	t.Cleanup(func() { Base = old })
	boom := errors.New("boom")
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "p")
	cases := []struct {
		name      string
		results   []error // f's result per call; the last repeats
		attempts  int
		cancelled bool
		wantCalls int
		wantErr   error
	}{
		{name: "first call succeeds", results: []error{nil}, attempts: 3, wantCalls: 1},
		{name: "second call succeeds", results: []error{boom, nil}, attempts: 3, wantCalls: 2},
		{name: "every call fails", results: []error{boom}, attempts: 3, wantCalls: 3, wantErr: boom},
		{name: "not found stops at once", results: []error{notFound}, attempts: 5, wantCalls: 1, wantErr: notFound},
		{name: "cancelled before the first call", results: []error{boom}, attempts: 3, cancelled: true, wantCalls: 0, wantErr: context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelled {
				cancel()
			}
			calls := 0
			err := Do(ctx, tc.attempts, func() error {
				r := tc.results[min(calls, len(tc.results)-1)]
				calls++
				return r
			})
			if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) {
				t.Errorf("calls %d err %v, want %d %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
