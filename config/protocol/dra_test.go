package protocol

import (
	"strings"
	"testing"
)

func TestDRANames(t *testing.T) {
	for _, c := range []Class{ClassGeneral, ClassOnline, ClassOffline} {
		got, ok := DRAClassOf(DRADeviceClass(c))
		if !ok || got != c {
			t.Errorf("DRAClassOf(DRADeviceClass(%s)) = %q, %v", c, got, ok)
		}
	}
	for _, name := range []string{"", "gpu.qgpu.io", "batch.gpu.qgpu.io", "general.gpu.nvidia.com", "general.gpu.qgpu.io.evil"} {
		if c, ok := DRAClassOf(name); ok {
			t.Errorf("DRAClassOf(%q) = %q, want none", name, c)
		}
	}
	for i := range MaxCards {
		got, ok := DRADeviceIndex(DRADeviceName(i))
		if !ok || got != i {
			t.Errorf("DRADeviceIndex(DRADeviceName(%d)) = %d, %v", i, got, ok)
		}
	}
	for _, name := range []string{"", "gpu-", "gpu-01", "gpu--1", "gpu-64", "gpu-1x", "card-1", "gpu-99999999999999999999"} {
		if i, ok := DRADeviceIndex(name); ok {
			t.Errorf("DRADeviceIndex(%q) = %d, want none", name, i)
		}
	}
}

func TestDRAClassConfig(t *testing.T) {
	for _, c := range []Class{ClassGeneral, ClassOnline, ClassOffline} {
		got, err := DecodeDRAClassConfig(NewDRAClassConfig(c).Encode())
		if err != nil || got.Class != c {
			t.Errorf("round trip of %s: %+v, %v", c, got, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{`{"apiVersion":"gpu.qgpu.io/v1","kind":"SliceConfig","class":"batch"}`, `unsupported value "batch"`},
		{`{"apiVersion":"gpu.qgpu.io/v2","kind":"SliceConfig","class":"online"}`, `apiVersion "gpu.qgpu.io/v2"`},
		{`{"apiVersion":"gpu.qgpu.io/v1","kind":"Other","class":"online"}`, `kind "Other"`},
		{`{"apiVersion":"gpu.qgpu.io/v1","kind":"SliceConfig","class":"online","cores":5}`, `unknown field "cores"`},
		{`{"apiVersion":"gpu.qgpu.io/v1","kind":"SliceConfig","class":"online"} {}`, `trailing data`},
	} {
		_, err := DecodeDRAClassConfig([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeDRAClassConfig(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}
