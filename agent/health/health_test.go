package health

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	ok := Check{Name: "store", Run: func() error { return nil }}
	bad := Check{Name: "device-plugins", Run: func() error { return errors.New("not registered") }}
	cases := []struct {
		name     string
		checks   []Check
		query    string
		wantCode int
		wantBody []string
	}{
		{"all pass", []Check{ok}, "", http.StatusOK, []string{"ok"}},
		{"all pass verbose", []Check{ok}, "?verbose", http.StatusOK, []string{"[+]store ok", "readyz check passed"}},
		{"one fails", []Check{ok, bad}, "", http.StatusServiceUnavailable,
			[]string{"[+]store ok", "[-]device-plugins failed: not registered", "readyz check failed"}},
		{"no checks", nil, "", http.StatusOK, []string{"ok"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Handler("readyz", tc.checks...).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz"+tc.query, nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tc.wantCode {
				t.Errorf("code %d, want %d; body:\n%s", rec.Code, tc.wantCode, body)
			}
			for _, w := range tc.wantBody {
				if !strings.Contains(string(body), w) {
					t.Errorf("body lacks %q:\n%s", w, body)
				}
			}
		})
	}
}

func TestWithTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	hung := WithTimeout(Check{Name: "store", Run: func() error { <-release; return nil }}, 20*time.Millisecond)
	if err := hung.Run(); !errors.Is(err, ErrTimeout) {
		t.Errorf("hung check: %v, want ErrTimeout", err)
	}
	// A check that returns at once, under a timeout a loaded machine cannot reach.
	failing := WithTimeout(Check{Name: "store", Run: func() error { return io.ErrUnexpectedEOF }}, time.Minute)
	if err := failing.Run(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("failing check: %v", err)
	}
	if hung.Name != "store" {
		t.Errorf("name %q", hung.Name)
	}
}
