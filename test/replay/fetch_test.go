package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// The trace files make replay fetches; their checksums are pinned in the script.
var traceFiles = []string{"openb_node_list_gpu_node.csv", "openb_pod_list_default.csv"}

// fetchTraces runs hack/fetch-traces.sh DIR with env added and git made
// unreachable (a file:// remote that does not exist), so no test touches the
// network.
func fetchTraces(t *testing.T, dir string, env ...string) (exitCode int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command("bash", "../../hack/fetch-traces.sh", dir)
	cmd.Env = append(os.Environ(), "TRACES_GIT_URL=file://"+filepath.Join(t.TempDir(), "no-such-repo"))
	cmd.Env = append(cmd.Env, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}

// A mirror that serves other bytes than the pinned files: nothing is
// written, and the error names the file, both checksums and what to do.
func TestFetchTracesRefusesWrongChecksum(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if !strings.HasSuffix(r.URL.Path, "/cluster-trace-gpu-v2023/csv/"+filepath.Base(r.URL.Path)) {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("name,not,the,trace\n"))
	}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "traces")
	code, _, stderr := fetchTraces(t, dir, "TRACES_RAW_BASE="+srv.URL)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	if requests.Load() != int32(len(traceFiles)) {
		t.Errorf("%d requests to the mirror, want one per file (%d)", requests.Load(), len(traceFiles))
	}
	for _, f := range traceFiles {
		if !strings.Contains(stderr, f+" from by_http: sha256 ") || !strings.Contains(stderr, "not used") {
			t.Errorf("stderr does not report %s's checksum mismatch:\n%s", f, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("%s written despite its checksum: %v", f, err)
		}
	}
	if !strings.Contains(stderr, "make replay TRACES=<directory>") {
		t.Errorf("stderr does not say how to use a local copy:\n%s", stderr)
	}
}

// TRACES=<dir> (FETCH_TRACES=0) checks a given copy and never fetches.
func TestFetchTracesChecksGivenCopy(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, traceFiles[0]), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := fetchTraces(t, dir, "FETCH_TRACES=0", "TRACES_RAW_BASE=http://127.0.0.1:1")
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		traceFiles[0] + ": sha256 ",      // wrong content: both checksums
		traceFiles[1] + ": no such file", // missing
		"is not the pinned trace",        // what it means
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "by_http") {
		t.Errorf("a given copy was fetched over:\n%s", stderr)
	}
	got, err := os.ReadFile(filepath.Join(dir, traceFiles[0]))
	if err != nil || string(got) != "edited\n" {
		t.Errorf("the given copy changed: %q %v", got, err)
	}
}

// With a copy of the real files (QGPU_TEST_TRACES=<dir>), a mirror serving
// them at the pinned commit's paths is fetched from and accepted, and a
// second run keeps what is there.
func TestFetchTracesFromMirror(t *testing.T) {
	src := os.Getenv("QGPU_TEST_TRACES")
	if src == "" {
		t.Skip("QGPU_TEST_TRACES=<dir with the two openb files> runs this test")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	const prefix = "/alibaba/clusterdata/50a91c7c74abe3b658188dc78ac1dd302970d40c/cluster-trace-gpu-v2023/csv/"
	srv := httptest.NewServer(http.StripPrefix(prefix, http.FileServer(http.Dir(src))))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "traces")
	code, stdout, stderr := fetchTraces(t, dir, "TRACES_RAW_BASE="+srv.URL)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for _, f := range traceFiles {
		if !strings.Contains(stdout, f+" (by_http, checksum matches)") {
			t.Errorf("stdout does not report %s fetched:\n%s", f, stdout)
		}
	}
	srv.Close()
	code, stdout, stderr = fetchTraces(t, dir, "TRACES_RAW_BASE=http://127.0.0.1:1")
	if code != 0 || !strings.Contains(stdout, "(checksums match)") {
		t.Errorf("second run: exit %d\n%s%s", code, stdout, stderr)
	}
}
