package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// RestartAgent makes the node kill its agent child with SIGKILL, as a crash
// would, and start it again with the same command line (SIGUSR1 to
// bin/qgpu-hollow-node). It returns at once; wait for the agent's log.
func (n *HollowNode) RestartAgent() error {
	if err := n.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return fmt.Errorf("signalling hollow node %s: %w", n.Name, err)
	}
	return nil
}

// PauseKubelet stops the hollow kubelet process with SIGSTOP (its agent
// keeps running) until resume is called: API changes made meanwhile reach
// the kubelet only afterwards, in the order of its watch. Tests use it to
// make the kubelet admit pods in an order of their choosing.
func (n *HollowNode) PauseKubelet() (resume func() error, err error) {
	pid, err := n.kubeletPID()
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("stopping hollow kubelet %s (pid %d): %w", n.Name, pid, err)
	}
	return func() error { return syscall.Kill(pid, syscall.SIGCONT) }, nil
}

// kubeletPID is the process running the kubelet: with isolation, the
// re-executed child of the node program (which itself only relays
// signals); the agent is a child of that one and is not the kubelet.
func (n *HollowNode) kubeletPID() (int, error) {
	pid := n.cmd.Process.Pid
	// Go forks from any of its threads: read the children of every task.
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("finding the kubelet of node %s: no /proc/%d/task/*/children (%v)", n.Name, pid, err)
	}
	var children []string
	for _, f := range files {
		b, _ := os.ReadFile(f)
		children = append(children, strings.Fields(string(b))...)
	}
	self, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	for _, f := range children {
		child, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", child)); exe == self {
			return child, nil
		}
	}
	return pid, nil // not isolated: the node program is the kubelet
}
