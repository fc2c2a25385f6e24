package priority

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// onlineBusy reports whether a process of one of the card's online pods has
// had SM utilisation above BusyUtil in an NVML sample newer than the last
// poll's. No new sample at all (ERROR_NOT_FOUND) is idle.
func (c *Controller) onlineBusy(cd *card) (bool, error) {
	dev, ok := c.cfg.Devices[cd.id.UUID]
	if !ok {
		return false, fmt.Errorf("card %s: no NVML device", cd.id.UUID)
	}
	samples, ret := dev.GetProcessUtilization(cd.lastSample)
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND:
		return false, nil
	default:
		return false, fmt.Errorf("card %s: process utilization: %s", cd.id.UUID, ret.Error())
	}
	busy := false
	for _, s := range samples {
		cd.lastSample = max(cd.lastSample, s.TimeStamp)
		if !busy && s.SmUtil > c.cfg.BusyUtil && cd.online[c.podOf(s.Pid)] {
			busy = true
		}
	}
	return busy, nil
}

// podOf maps a PID to its pod UID through its cgroup, cached until the next
// grants refresh (PIDs are reused only after the process is gone, and the
// cache is short-lived). A PID that cannot be resolved belongs to no pod.
func (c *Controller) podOf(pid uint32) string {
	if uid, ok := c.pidPods[pid]; ok {
		return uid
	}
	uid, err := c.cfg.Procs.PodUID(pid)
	if err != nil {
		uid = ""
	}
	c.pidPods[pid] = uid
	return uid
}

// DevicesByUUID returns the node's NVML devices by UUID (NVML initialised).
func DevicesByUUID(lib nvml.Interface) (map[string]nvml.Device, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting devices: %s", ret.Error())
	}
	out := map[string]nvml.Device{}
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d: %s", i, ret.Error())
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("device %d: UUID: %s", i, ret.Error())
		}
		out[uuid] = dev
	}
	return out, nil
}
