package main

import (
	"strings"
	"testing"
)

// TestPrivateSockets reads lines as `containerd config dump` prints them
// (containerd 2.1.4, the e2e node's configuration).
func TestPrivateSockets(t *testing.T) {
	const dir = "/work/_output/e2e-node/e2e-node-1"
	dump := func(nri string) string {
		return "[grpc]\n  address = '" + dir + "/containerd.sock'\n  tcp_address = ''\n[ttrpc]\n  address = ''\n" +
			"  [plugins.'io.containerd.grpc.v1.cri']\n    stream_server_address = '127.0.0.1'\n" +
			"  [plugins.'io.containerd.nri.v1.nri']\n    disable = false\n    socket_path = '" + nri + "'\n"
	}
	for _, tc := range []struct {
		name, nri, wantErr string
	}{
		{"the default NRI socket, on the node's own /run/nri", "/var/run/nri/nri.sock", ""},
		{"under the node's dir", dir + "/nri.sock", ""},
		{"shared by every node", "/var/lib/nri/nri.sock", "socket_path /var/lib/nri/nri.sock is the same path on every node"},
		{"a sibling's prefix is not the dir", dir + "0/nri.sock", "is the same path on every node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := privateSockets(dump(tc.nri), dir)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("privateSockets: %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestNodeTmpfsHoldsNRI: containerd's default NRI socket lives in a tmpfs
// of each node's own (two containerds re-creating one socket race).
func TestNodeTmpfsHoldsNRI(t *testing.T) {
	if err := privateSockets("socket_path = '/var/run/nri/nri.sock'", "/elsewhere"); err != nil {
		t.Fatal(err)
	}
}
