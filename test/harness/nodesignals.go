package harness

import (
	"fmt"
	"os"
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, fmt.Errorf("finding the kubelet of node %s: %w", n.Name, err)
	}
	self, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	for _, f := range strings.Fields(string(b)) {
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
