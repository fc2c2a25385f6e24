// Command cni is the e2e node's CNI plugin (make e2e-node, type
// "qgpu-e2e-cni"). It gives a pod a veth eth0 with one link-local address
// that only the host can reach (no default route: nothing leaves the pod but
// to the host's 169.254.0.1, from which the kubelet probes), and hands the
// pod's network namespace to the e2e program, which opens the Kubernetes
// Service address (10.0.0.1:443) inside it and forwards to the apiserver on
// the host's loopback: the one Service pods need, without kube-proxy.
//
// It runs `ip` (iproute2) and keeps its address counter in dataDir.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// conf is the network configuration containerd passes on stdin.
type conf struct {
	CNIVersion string `json:"cniVersion"`
	Name       string `json:"name"`
	// Prefix is the node's /24 of 169.254.0.0/16, e.g. "169.254.11".
	Prefix string `json:"prefix"`
	// DataDir holds the address counter.
	DataDir string `json:"dataDir"`
	// ProxySocket is the e2e program's unix socket that takes the netns.
	ProxySocket string `json:"proxySocket"`
	// ServiceIP is the address put on the pod's lo for the proxy.
	ServiceIP string `json:"serviceIP"`
}

// hostIP is the host end of every pod's veth.
const hostIP = "169.254.0.1"

func main() {
	if err := run(); err != nil {
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "code": 999, "msg": err.Error()})
		os.Exit(1)
	}
}

func run() error {
	cmd := os.Getenv("CNI_COMMAND")
	if cmd == "VERSION" {
		return json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "supportedVersions": []string{"0.4.0", "1.0.0"}})
	}
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	var c conf
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("network config: %w", err)
	}
	id, netns, ifname := os.Getenv("CNI_CONTAINERID"), os.Getenv("CNI_NETNS"), os.Getenv("CNI_IFNAME")
	hostIf := "qe" + short(id)
	switch cmd {
	case "ADD":
		ip, err := add(c, netns, ifname, hostIf)
		if err != nil {
			_ = exec.Command("ip", "link", "del", hostIf).Run()
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(map[string]any{
			"cniVersion": c.CNIVersion,
			"interfaces": []map[string]any{{"name": ifname, "sandbox": netns}},
			"ips":        []map[string]any{{"address": ip + "/32", "interface": 0}},
		})
	case "DEL":
		// The veth goes with the netns; delete it early when the netns stays.
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		return nil
	case "CHECK", "GC", "STATUS":
		return nil
	}
	return fmt.Errorf("unsupported CNI_COMMAND %q", cmd)
}

func short(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])[:11]
}

func add(c conf, netns, ifname, hostIf string) (string, error) {
	ip, err := nextIP(c)
	if err != nil {
		return "", err
	}
	ns, err := nsName(netns)
	if err != nil {
		return "", err
	}
	peer := "qp" + hostIf[2:]
	steps := [][]string{
		{"link", "add", hostIf, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", ns},
		{"-n", ns, "link", "set", peer, "name", ifname},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", ip + "/32", "dev", ifname},
		{"-n", ns, "link", "set", ifname, "up"},
		{"-n", ns, "route", "add", hostIP + "/32", "dev", ifname, "scope", "link"},
		{"-n", ns, "addr", "add", c.ServiceIP + "/32", "dev", "lo"},
		{"addr", "add", hostIP + "/32", "dev", hostIf, "scope", "link"},
		{"link", "set", hostIf, "up"},
		{"route", "add", ip + "/32", "dev", hostIf, "src", hostIP},
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return ip, handOver(c.ProxySocket, netns)
}

// nsName is the name `ip -n` takes: containerd mounts pod netns under /var/run/netns.
func nsName(netns string) (string, error) {
	dir, name := filepath.Split(netns)
	if d := filepath.Clean(dir); d != "/var/run/netns" && d != "/run/netns" {
		return "", fmt.Errorf("netns %s is not under /var/run/netns", netns)
	}
	return name, nil
}

// nextIP hands out <prefix>.2 .. <prefix>.254 from a counter file, under a lock.
func nextIP(c conf) (string, error) {
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return "", err
	}
	f, err := os.OpenFile(filepath.Join(c.DataDir, "last"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	last, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	next := last + 1
	if next < 2 {
		next = 2
	}
	if next > 254 {
		return "", fmt.Errorf("no addresses left in %s.0/24", c.Prefix)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(next)+"\n"), 0); err != nil {
		return "", err
	}
	return c.Prefix + "." + strconv.Itoa(next), nil
}

// handOver sends an open descriptor of the pod's netns to the e2e program,
// which opens the Service address inside it, and waits for its "ok".
func handOver(socket, netns string) error {
	ns, err := os.Open(netns)
	if err != nil {
		return err
	}
	defer ns.Close()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return fmt.Errorf("e2e proxy: %w", err)
	}
	defer conn.Close()
	uc := conn.(*net.UnixConn)
	if _, _, err := uc.WriteMsgUnix([]byte(netns), unix.UnixRights(int(ns.Fd())), nil); err != nil {
		return fmt.Errorf("e2e proxy: %w", err)
	}
	reply := make([]byte, 256)
	n, err := conn.Read(reply)
	if err != nil {
		return fmt.Errorf("e2e proxy: %w", err)
	}
	if got := string(reply[:n]); got != "ok" {
		return fmt.Errorf("e2e proxy: %s", got)
	}
	return nil
}
