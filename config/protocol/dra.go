package protocol

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Names of the Dynamic Resource Allocation path (docs/dra.md): the agent's
// kubelet plugin publishes one device per card under DRADriver, the
// DeviceClasses name the three classes, and a claim asks for a slice by
// consuming the device's capacity.
const (
	// DRADriver is the DRA driver name: the ResourceSlices' driver, the
	// allocation results' driver, the kubelet plugin's registration name.
	DRADriver = "gpu.qgpu.io"

	// DRACapacityMemory is a card's memory in bytes; a claim consumes whole
	// GiB (the capacity's request policy steps by 1Gi).
	DRACapacityMemory = "memory"
	// DRACapacityCores is a card's compute, 100 per card; a general claim
	// consumes its qgpu-core, an offline claim its qgpu-core-greedy, an
	// online claim none.
	DRACapacityCores = "cores"

	// Device attributes.
	DRAAttributeUUID      = "uuid"
	DRAAttributeIndex     = "index"
	DRAAttributeModel     = "model"
	DRAAttributeMemoryGiB = "memoryGiB"

	// DRAConfigAPIVersion and DRAConfigKind mark the opaque configuration a
	// DeviceClass carries for DRADriver (DRAClassConfig).
	DRAConfigAPIVersion = "gpu.qgpu.io/v1"
	DRAConfigKind       = "SliceConfig"
)

// DRADeviceClass is the DeviceClass a claim of class c names:
// general.gpu.qgpu.io, online.gpu.qgpu.io, offline.gpu.qgpu.io.
func DRADeviceClass(c Class) string { return string(c) + "." + DRADriver }

// DRAClassOf is the class a DeviceClass name stands for; false for a class
// that is not one of DRADriver's three.
func DRAClassOf(deviceClass string) (Class, bool) {
	name, ok := strings.CutSuffix(deviceClass, "."+DRADriver)
	if !ok {
		return "", false
	}
	switch c := Class(name); c {
	case ClassGeneral, ClassOnline, ClassOffline:
		return c, true
	}
	return "", false
}

// DRATaintUnhealthy is the key of the NoSchedule taint on an unhealthy
// card's device in its node's ResourceSlice (where the API server keeps
// device taints: the DRADeviceTaints feature gate).
const DRATaintUnhealthy = "gpu.qgpu.io/unhealthy"

// DRADeviceName is the device of card index i in a node's ResourceSlice.
func DRADeviceName(index int) string { return "gpu-" + strconv.Itoa(index) }

// DRADeviceIndex is the card index of a device name; false for a name this
// driver never publishes.
func DRADeviceIndex(device string) (int, bool) {
	digits, ok := strings.CutPrefix(device, "gpu-")
	if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i < 0 || i >= MaxCards {
		return 0, false
	}
	return i, true
}

// DRAClassConfig is the opaque configuration of a qGPU DeviceClass: the
// class travels from the DeviceClass through the allocation result to the
// kubelet plugin, which hands it to the enforcement backend and the priority
// controller.
type DRAClassConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Class      Class  `json:"class"`
}

// NewDRAClassConfig is class c's configuration.
func NewDRAClassConfig(c Class) DRAClassConfig {
	return DRAClassConfig{APIVersion: DRAConfigAPIVersion, Kind: DRAConfigKind, Class: c}
}

// DecodeDRAClassConfig strictly decodes a DeviceClass's opaque parameters.
func DecodeDRAClassConfig(data []byte) (DRAClassConfig, error) {
	var c DRAClassConfig
	if err := decodeStrict(data, &c); err != nil {
		return c, err
	}
	if c.APIVersion != DRAConfigAPIVersion || c.Kind != DRAConfigKind {
		return c, fmt.Errorf("apiVersion %q kind %q: want %q %q", c.APIVersion, c.Kind, DRAConfigAPIVersion, DRAConfigKind)
	}
	switch c.Class {
	case ClassGeneral, ClassOnline, ClassOffline:
		return c, nil
	}
	return c, fmt.Errorf("class: unsupported value %q: must be %q, %q or %q", c.Class, ClassGeneral, ClassOnline, ClassOffline)
}

// Encode is the configuration as DeviceClass parameters.
func (c DRAClassConfig) Encode() []byte {
	b, _ := json.Marshal(c) // three strings: cannot fail
	return b
}
