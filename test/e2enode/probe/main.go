// Command probe is the image the e2e node (make e2e-node) runs in place of
// the examples' workloads. It prints what the container was given, as JSON
// lines on stdout, then sleeps until it is stopped:
//
//	{"kind":"dev","name":"nvidia1","char":true,"major":195,"minor":1}
//	{"kind":"env","name":"QGPU_MEMORY_GIB","value":"4"}
//	{"kind":"mount","target":"/etc/hosts","root":"/var/lib/.../hosts","source":"/dev/vda","fstype":"ext4","ro":true}
//	{"kind":"file","name":"/etc/ld.so.preload","value":"/usr/local/vgpu/libvgpu.so\n"}
//	{"kind":"writable","name":"/tmp/vgpu"}
//	{"kind":"done"}
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sort"
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
