// Command probe is the image the e2e node (make e2e-node) runs in place of
// the examples' workloads. It prints what the container was given, as JSON
// lines on stdout, then sleeps until it is stopped:
//
//	{"kind":"dev","name":"nvidia1","char":true,"major":195,"minor":1}
//	{"kind":"env","name":"QGPU_MEMORY_GIB","value":"4"}
//	{"kind":"mount","target":"/etc/hosts","root":"/var/lib/.../hosts","source":"/dev/vda","fstype":"ext4","ro":true}
//	{"kind":"file","name":"/etc/ld.so.preload","value":"/usr/local/vgpu/libvgpu.so\n"}
//	{"kind":"writable","name":"/tmp/vgpu"}
//	{"kind":"escape","name":"nvidia3","value":"refused: open: operation not permitted"}
//	{"kind":"own","name":"nvidia1","value":"open: no such device or address"}
//	{"kind":"attempt","name":"mps-pipe-write","value":"refused: create: read-only file system"}
//	{"kind":"done"}
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Line is one thing the container sees.
type Line struct {
	Kind   string `json:"kind"` // dev, env, mount, error, done
	Name   string `json:"name,omitempty"`
	Value  string `json:"value,omitempty"`
	Char   bool   `json:"char,omitempty"`
	Major  uint32 `json:"major,omitempty"`
	Minor  uint32 `json:"minor,omitempty"`
	Target string `json:"target,omitempty"`
	Root   string `json:"root,omitempty"` // the mounted directory inside its file system (a bind mount's source)
	Source string `json:"source,omitempty"`
	FSType string `json:"fstype,omitempty"`
	RO     bool   `json:"ro,omitempty"`
}

func main() {
	enc := json.NewEncoder(os.Stdout)
	emit := func(l Line) { _ = enc.Encode(l) }
	devices(emit)
	environment(emit)
	mounts(emit)
	hamiFiles(emit)
	escapes(emit)
	tenantAttempts(emit)
	driverFiles(emit)
	emit(Line{Kind: "done"})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

func devices(emit func(Line)) {
	entries, err := os.ReadDir("/dev")
	if err != nil {
		emit(Line{Kind: "error", Value: err.Error()})
		return
	}
	for _, e := range entries {
		l := Line{Kind: "dev", Name: e.Name()}
		var st unix.Stat_t
		if err := unix.Lstat("/dev/"+e.Name(), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
			l.Char, l.Major, l.Minor = true, unix.Major(st.Rdev), unix.Minor(st.Rdev)
		}
		emit(l)
	}
}

func environment(emit func(Line)) {
	env := os.Environ()
	sort.Strings(env)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		emit(Line{Kind: "env", Name: k, Value: v})
	}
}

// mounts reads /proc/self/mountinfo: field 4 is the root of the mount
// inside its file system, field 5 the mount point; after the " - "
// separator come the file system type and the source.
func mounts(emit func(Line)) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		emit(Line{Kind: "error", Value: err.Error()})
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(tail) < 2 {
			emit(Line{Kind: "error", Value: fmt.Sprintf("mountinfo line %q", sc.Text())})
			continue
		}
		ro := strings.HasPrefix(fields[5], "ro,") || fields[5] == "ro"
		emit(Line{Kind: "mount", Target: fields[4], Root: fields[3], FSType: tail[0], Source: tail[1], RO: ro})
	}
}

// hamiFiles prints what the hami-core and mps backends put in a container,
// where it exists: the preload file's content, the MPS control daemon's
// mark in the shared memory directory, and whether the directories the
// container must write are writable by its user.
func hamiFiles(emit func(Line)) {
	for _, f := range []string{"/etc/ld.so.preload", "/dev/shm/qgpu-mps-control-daemon"} {
		if data, err := os.ReadFile(f); err == nil {
			emit(Line{Kind: "file", Name: f, Value: string(data)})
		}
	}
	for _, dir := range []string{"/tmp/vgpu", "/tmp/vgpulock", "/dev/shm"} {
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		f, err := os.CreateTemp(dir, "probe-")
		if err != nil {
			emit(Line{Kind: "error", Value: err.Error()})
			continue
		}
		f.Close()
		os.Remove(f.Name())
		emit(Line{Kind: "writable", Name: dir})
	}
}

// tenantAttempts are the tenant suite's attempts, each made only where
// the pod's spec asks for it (the other pods' output stays as it was):
//
//   - PROBE_MPS_PIPE_WRITE=1: create a file in the MPS pipe directory
//     (/tmp/nvidia-mps), where a root tenant would replace the control
//     pipe: {"kind":"attempt","name":"mps-pipe-write","value":...};
//   - PROBE_SHM_WRITE=<name>: leave a segment /dev/shm/<name> (as a
//     DataLoader or NCCL would) for another pod to look for;
//   - PROBE_SHM_READ=<name>: read /dev/shm/<name>:
//     {"kind":"attempt","name":"shm-read","value":"read: <content>"} or
//     "absent: ..." where the segment is not there.
func tenantAttempts(emit func(Line)) {
	if os.Getenv("PROBE_MPS_PIPE_WRITE") == "1" {
		path := "/tmp/nvidia-mps/qgpu-probe-redirect"
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o666)
		if err != nil {
			emit(Line{Kind: "attempt", Name: "mps-pipe-write", Value: writeVerdict("create", err)})
		} else {
			f.Close()
			os.Remove(path)
			emit(Line{Kind: "attempt", Name: "mps-pipe-write", Value: "written: " + path})
		}
	}
	if name := os.Getenv("PROBE_SHM_WRITE"); name != "" {
		host, _ := os.Hostname()
		if err := os.WriteFile("/dev/shm/"+name, []byte("segment of "+host), 0o666); err != nil {
			emit(Line{Kind: "error", Value: "writing /dev/shm/" + name + ": " + err.Error()})
		} else {
			emit(Line{Kind: "shm-written", Name: name})
		}
	}
	if name := os.Getenv("PROBE_SHM_READ"); name != "" {
		data, err := os.ReadFile("/dev/shm/" + name)
		switch {
		case err == nil:
			emit(Line{Kind: "attempt", Name: "shm-read", Value: "read: " + string(data)})
		case errors.Is(err, os.ErrNotExist):
			emit(Line{Kind: "attempt", Name: "shm-read", Value: "absent: " + err.Error()})
		default:
			emit(Line{Kind: "attempt", Name: "shm-read", Value: writeVerdict("read", err)})
		}
	}
}

// writeVerdict is verdict with a read-only file system (EROFS) a refusal
// too: what a read-only mount answers.
func writeVerdict(op string, err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) && errno == unix.EROFS {
		return "refused: " + op + ": " + errno.Error()
	}
	return verdict(op, err)
}

// libDir is where the driver's libraries appear in a container (the CDI
// specs nvidia-ctk and the agent write mount them at their host paths).
const libDir = "/usr/lib/x86_64-linux-gnu"

// driverFiles lists the driver's libraries the container got, with the
// target of each link (the toolkit's create-symlinks hook makes
// libcuda.so -> libcuda.so.1), and whether the update-ldcache hook left an
// ld.so.cache.
func driverFiles(emit func(Line)) {
	entries, _ := os.ReadDir(libDir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "libcuda") && !strings.HasPrefix(e.Name(), "libnvidia") {
			continue
		}
		target, _ := os.Readlink(filepath.Join(libDir, e.Name()))
		emit(Line{Kind: "lib", Name: e.Name(), Value: target})
	}
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		emit(Line{Kind: "file", Name: "/etc/ld.so.cache"})
	}
}

// maxMinor bounds the card minors escapes tries: more cards than any e2e
// node has.
const maxMinor = 8

// escapes tries to reach every card the container was not given: for each
// minor below maxMinor without a /dev/nvidia<minor>, it makes the device
// node itself (mknod needs CAP_MKNOD, which root in a container has and
// other users lack) and opens it. The device cgroup must refuse the open
// (EPERM); a node without the driver answers ENXIO to an open it lets
// through, so "opened" or any other error is an escape. The container's own
// cards are opened too: there the cgroup lets the open through (ENXIO
// here, success on a real card), which shows that EPERM above came from
// the cgroup and not from something that refuses every card.
func escapes(emit func(Line)) {
	dir := writableDir()
	for minor := range maxMinor {
		name := "nvidia" + strconv.Itoa(minor)
		if _, err := os.Stat("/dev/" + name); err == nil {
			emit(Line{Kind: "own", Name: name, Value: openResult("/dev/" + name)})
			continue
		}
		if dir == "" {
			// Nothing was tried: not a refusal (the e2e counts it as a failure).
			emit(Line{Kind: "escape", Name: name, Value: "not attempted: no writable directory to make a device node in"})
			continue
		}
		path := filepath.Join(dir, "qgpu-escape-"+name)
		_ = os.Remove(path)
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(minor)))); err != nil {
			emit(Line{Kind: "escape", Name: name, Value: verdict("mknod", err)})
			continue
		}
		emit(Line{Kind: "escape", Name: name, Value: openResult(path)})
		os.Remove(path)
	}
}

// writableDir is a directory the container's user may create files in.
func writableDir() string {
	for _, dir := range []string{"/dev", "/tmp", "/dev/shm"} {
		f, err := os.CreateTemp(dir, "probe-")
		if err == nil {
			f.Close()
			os.Remove(f.Name())
			return dir
		}
	}
	return ""
}

func openResult(path string) string {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return verdict("open", err)
	}
	f.Close()
	return "opened"
}

// verdict is "refused: <op>: <error>" for EPERM and EACCES, what the device
// cgroup and a missing capability answer, else "<op>: <error>".
func verdict(op string, err error) string {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return op + ": " + err.Error()
	}
	if errno == unix.EPERM || errno == unix.EACCES {
		return "refused: " + op + ": " + errno.Error()
	}
	return op + ": " + errno.Error()
}
