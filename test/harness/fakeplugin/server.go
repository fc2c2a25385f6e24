package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

var errUnknownDevice = errors.New("unknown device")

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	c     config
	known map[string]bool
}

var _ pluginapi.DevicePluginServer = &plugin{}

// serve listens on the plugin socket and answers the device-plugin API
// until Stop. The socket is removed first: the device manager deletes every
// socket in the directory when it starts, and a stale one from our previous
// incarnation would make Listen fail.
func serve(c config) (*grpc.Server, error) {
	path := filepath.Join(c.socketDir, c.socket)
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("removing stale socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	p := &plugin{c: c, known: map[string]bool{}}
	for _, id := range deviceIDs(c) {
		p.known[id] = true
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() {
		if err := srv.Serve(ln); err != nil {
			log.Printf("serving %s: %v", path, err)
		}
	}()
	return srv, nil
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once and then holds the stream open,
// as a plugin with static devices does.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	var devs []*pluginapi.Device
	for _, id := range deviceIDs(p.c) {
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return fmt.Errorf("sending device list: %w", err)
	}
	<-stream.Context().Done()
	return nil
}

// Allocate checks every requested ID before answering, so a bad request
// fails as a whole.
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		for _, id := range creq.DevicesIds {
			if !p.known[id] {
				return nil, fmt.Errorf("allocating %q: %w", id, errUnknownDevice)
			}
		}
		log.Printf("Allocate %v", creq.DevicesIds)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{p.c.envName: envValue(creq.DevicesIds)},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
