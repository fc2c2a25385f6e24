package health

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qgpu-scheduler/qgpu/agent/store"
)

type fakeDRA struct{ registered, intact error }

func (f fakeDRA) Registered() error  { return f.registered }
func (f fakeDRA) SliceIntact() error { return f.intact }

// TestDRAProbes: in DRA mode readiness asks for the kubelet's
// registration and the slice's read-back instead of the device plugins and
// the inventory; liveness asks for the store only.
func TestDRAProbes(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := NewDRAProbes(st)
	probe := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		p.Handlers()[path].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path+"?verbose", nil))
		return rec.Code, rec.Body.String()
	}
	steps := []struct {
		name     string
		dra      *fakeDRA
		code     int
		contains []string
	}{
		{"not started", nil, http.StatusServiceUnavailable, []string{"[-]kubelet-plugin failed: DRA kubelet plugin not started", "[-]resourceslice failed"}},
		{"not registered", &fakeDRA{registered: errors.New("not yet"), intact: errors.New("not read back")}, http.StatusServiceUnavailable, []string{"[-]kubelet-plugin failed: not yet", "[-]resourceslice failed: not read back"}},
		{"capacity dropped", &fakeDRA{intact: errors.New("dropped")}, http.StatusServiceUnavailable, []string{"[+]kubelet-plugin ok", "[-]resourceslice failed: dropped"}},
		{"ready", &fakeDRA{}, http.StatusOK, []string{"[+]store ok", "[+]kubelet-plugin ok", "[+]resourceslice ok"}},
	}
	for _, s := range steps {
		if s.dra != nil {
			p.DRAStarted(*s.dra)
		}
		code, body := probe("/readyz")
		if code != s.code || strings.Contains(body, "device-plugins") || strings.Contains(body, "inventory") {
			t.Errorf("%s: /readyz %d\n%s\nwant %d, no device-plugin or inventory check", s.name, code, body, s.code)
		}
		for _, c := range s.contains {
			if !strings.Contains(body, c) {
				t.Errorf("%s: /readyz lacks %q:\n%s", s.name, c, body)
			}
		}
		if code, body := probe("/livez"); code != http.StatusOK {
			t.Errorf("%s: /livez %d\n%s", s.name, code, body)
		}
	}
}
