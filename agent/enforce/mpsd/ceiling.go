package mpsd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/qgpu-scheduler/qgpu/agent/enforce"
)

// The card's ceiling (enforce.MPSCeiling, written by the agent) is put in
// force through the daemon's control pipe, as NVIDIA's device plugin puts
// its per-replica limits: the defaults bind the next server, and since a
// default does not reach a server already running, that server is set
// too, binding its clients from then on (clients already connected keep
// what they had). NVIDIA's MPS lets a client's CUDA_MPS_* variables only
// lower these limits. The control daemon forgets them when it quits, so
// every (re)start of the daemon puts them in force again before the card
// is ready. docs/backend-mps.md#the-daemon-side-ceiling.

// mpsDevice is the card's ordinal as its daemon sees it: the daemon runs
// with CUDA_VISIBLE_DEVICES=<uuid>, so its one card is device 0 (the
// clients' CUDA_MPS_PINNED_DEVICE_MEM_LIMIT names device 0 too).
const mpsDevice = "0"

// ceilingCommands are the control commands that put c in force: the
// defaults first, then each running server, so that a server spawned in
// between gets the new defaults.
func ceilingCommands(c enforce.MPSCeiling, servers []string) []string {
	mem := strconv.FormatInt(c.MemoryMiB, 10) + "M"
	threads := strconv.FormatInt(c.ThreadPercentage, 10)
	cmds := []string{
		"set_default_device_pinned_mem_limit " + mpsDevice + " " + mem,
		"set_default_active_thread_percentage " + threads,
	}
	for _, pid := range servers {
		cmds = append(cmds,
			"set_device_pinned_mem_limit "+pid+" "+mpsDevice+" "+mem,
			"set_active_thread_percentage "+pid+" "+threads)
	}
	return cmds
}

// syncCeiling puts the card's ceiling file in force on m's daemon unless
// that text already is, and then writes it to the applied file, which the
// agent waits for. No file: nothing to do (no client was handed the card
// yet). A file that does not parse is refused, naming the file and its
// text, and nothing changes: the ceiling in force stays, and so does the
// applied file the agent compares with.
func (d *Daemons) syncCeiling(m *daemon) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	path := filepath.Join(filepath.Dir(m.ready), enforce.MPSCeilingFile)
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the MPS ceiling: %w", err)
	}
	text := string(raw)
	if text == m.applied {
		return nil
	}
	c, err := enforce.ParseMPSCeiling(text)
	if err != nil {
		return fmt.Errorf("refusing the MPS ceiling %s = %q: %w", path, strings.TrimSpace(text), err)
	}
	if d.Bin != "" {
		servers, err := d.control(m, "get_server_list")
		if err != nil {
			return fmt.Errorf("MPS ceiling %s: %w", path, err)
		}
		for _, cmd := range ceilingCommands(c, strings.Fields(servers)) {
			if _, err := d.control(m, cmd); err != nil {
				return fmt.Errorf("MPS ceiling %s: %w", path, err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(m.ready), enforce.MPSCeilingAppliedFile), raw, 0o644); err != nil {
		return fmt.Errorf("marking the MPS ceiling in force: %w", err)
	}
	m.applied = text
	d.Logger.Info("MPS ceiling in force", "card", m.uuid, "pinnedMemoryMiB", c.MemoryMiB,
		"activeThreadPercentage", c.ThreadPercentage, "simulated", d.Bin == "")
	return nil
}

// forgetCeiling: the daemon (re)starts or quits, and with it goes the
// ceiling it had in force.
func (d *Daemons) forgetCeiling(m *daemon) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applied = ""
	_ = os.Remove(filepath.Join(filepath.Dir(m.ready), enforce.MPSCeilingAppliedFile))
}

// control sends one command to m's daemon through nvidia-cuda-mps-control
// on its stdin, as `echo <command> | nvidia-cuda-mps-control` does, and
// returns what it printed.
func (d *Daemons) control(m *daemon, command string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.QuitTimeout)
	defer cancel()
	cmd := d.command(ctx, m)
	cmd.Stdin = strings.NewReader(command + "\n")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("MPS control command %q: %w (%s)", command, err, strings.TrimSpace(errOut.String()+out.String()))
	}
	return out.String(), nil
}
