package harness

import (
	"fmt"
	"os"
	"runtime"
	"sync"
)

// programTB implements ktesting.TB (the parameter type of the kube-apiserver
// test server) without the testing package, so that a plain main program (the
// playground) can start the same control plane as a test. Cleanups are kept
// until runCleanups; Fatal ends only the calling goroutine, which is why
// StartControlPlane calls the test server from a goroutine of its own.
type programTB struct {
	name   string
	logf   func(format string, args ...any)
	tmpDir string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
	errs     []string
}

func newProgramTB(name, tmpDir string, logf func(string, ...any)) *programTB {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &programTB{name: name, logf: logf, tmpDir: tmpDir}
}

func (t *programTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// runCleanups runs the registered cleanups in reverse order, like testing does.
func (t *programTB) runCleanups() {
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		f()
	}
}

func (t *programTB) Error(args ...any) { t.recordError(fmt.Sprint(args...)) }
func (t *programTB) Errorf(format string, args ...any) {
	t.recordError(fmt.Sprintf(format, args...))
}

func (t *programTB) recordError(msg string) {
	t.mu.Lock()
	t.failed = true
	t.errs = append(t.errs, msg)
	t.mu.Unlock()
	t.logf("ERROR: %s", msg)
}

// firstError returns the first recorded error message, if any.
func (t *programTB) firstError() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.errs) == 0 {
		return ""
	}
	return t.errs[0]
}

func (t *programTB) Fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *programTB) FailNow() {
	t.Fail()
	runtime.Goexit()
}

func (t *programTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *programTB) Fatal(args ...any) {
	t.recordError(fmt.Sprint(args...))
	runtime.Goexit()
}

func (t *programTB) Fatalf(format string, args ...any) {
	t.recordError(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (t *programTB) Helper()                          {}
func (t *programTB) Log(args ...any)                  { t.logf("%s", fmt.Sprint(args...)) }
func (t *programTB) Logf(format string, args ...any)  { t.logf(format, args...) }
func (t *programTB) Name() string                     { return t.name }
func (t *programTB) Setenv(key, value string)         { _ = os.Setenv(key, value) }
func (t *programTB) Skip(args ...any)                 { t.Fatal(append([]any{"skip: "}, args...)...) }
func (t *programTB) SkipNow()                         { t.Fatal("skip") }
func (t *programTB) Skipf(format string, args ...any) { t.Fatalf("skip: "+format, args...) }
func (t *programTB) Skipped() bool                    { return false }
func (t *programTB) TempDir() string                  { return t.tmpDir }
