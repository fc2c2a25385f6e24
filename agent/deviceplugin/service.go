package deviceplugin

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// GetDevicePluginOptions implements pluginapi.DevicePluginServer: no
// PreStartContainer, no preferred allocation (the IDs only count).
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch implements pluginapi.DevicePluginServer: the full list, then
// again on every change (health) until the stream or the server ends.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		devs, changed := p.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// Allocate implements pluginapi.DevicePluginServer. It validates every device
// ID of every container first, then answers each container.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	for _, cr := range req.ContainerRequests {
		for _, id := range cr.DevicesIds {
			if !p.known[id] {
				p.mu.Unlock()
				return nil, status.Error(codes.InvalidArgument, fmt.Errorf("%s: %w %q", p.Resource, ErrUnknownDevice, id).Error())
			}
		}
	}
	p.mu.Unlock()
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		car, err := p.alloc.Allocate(ctx, p.Resource, cr.DevicesIds)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Allocate refused", "resource", p.Resource, "devices", len(cr.DevicesIds))
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}

// GetPreferredAllocation implements pluginapi.DevicePluginServer; the kubelet
// does not call it because the options do not advertise it.
func (p *Plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// PreStartContainer implements pluginapi.DevicePluginServer (not requested).
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
