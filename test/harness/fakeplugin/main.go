// Command fakeplugin is a minimal device plugin for harness tests: it serves
// N devices of one resource over the real v1beta1 device-plugin gRPC API,
// registers with kubelet.sock, and registers again whenever kubelet.sock is
// re-created (a kubelet or device manager restart). Allocate returns the
// allocated IDs in one environment variable. It is built to
// bin/qgpu-fake-plugin and started by a hollow node with --agent-cmd.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type config struct {
	resource  string
	count     int
	envName   string
	socketDir string
	socket    string
}

func main() {
	c := config{}
	flag.StringVar(&c.resource, "resource", "example.com/widget", "extended resource name")
	flag.IntVar(&c.count, "count", 4, "number of devices")
	flag.StringVar(&c.envName, "env-name", "WIDGET_IDS", "variable Allocate sets to the comma-separated device IDs")
	flag.StringVar(&c.socketDir, "socket-dir", pluginapi.DevicePluginPath, "device plugin directory holding kubelet.sock")
	flag.StringVar(&c.socket, "socket", "fakeplugin.sock", "this plugin's socket name inside --socket-dir")
	flag.Parse()
	log.SetPrefix("fakeplugin: ")
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, c); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	log.Print("stopped")
}

// run serves and registers once per kubelet.sock incarnation.
func run(ctx context.Context, c config) error {
	kubeletSock := filepath.Join(c.socketDir, filepath.Base(pluginapi.KubeletSocket))
	for {
		ino, err := waitForSocket(ctx, kubeletSock, 0)
		if err != nil {
			return err
		}
		srv, err := serve(c)
		if err != nil {
			return err
		}
		if err := register(ctx, kubeletSock, c); err != nil {
			// The kubelet may be restarting right now: try the next socket.
			log.Printf("registration failed, waiting for a new kubelet.sock: %v", err)
		} else {
			log.Printf("registered %s with %d devices", c.resource, c.count)
		}
		_, err = waitForSocket(ctx, kubeletSock, ino)
		srv.Stop()
		if err != nil {
			return err
		}
		log.Print("kubelet.sock re-created, registering again")
	}
}

// waitForSocket polls until path exists with an inode other than notIno and
// returns that inode. Polling (100 ms) rather than inotify also catches a
// delete-and-create that happens between two events being read.
func waitForSocket(ctx context.Context, path string, notIno uint64) (uint64, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if fi, err := os.Stat(path); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Ino != notIno {
				return st.Ino, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

func register(ctx context.Context, kubeletSock string, c config) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dialing %s: %w", kubeletSock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     c.socket,
		ResourceName: c.resource,
	})
	if err != nil {
		return fmt.Errorf("registering %s: %w", c.resource, err)
	}
	return nil
}

func deviceIDs(c config) []string {
	ids := make([]string, c.count)
	for i := range ids {
		ids[i] = fmt.Sprintf("widget-%d", i)
	}
	return ids
}

func envValue(ids []string) string { return strings.Join(ids, ",") }
