// Package podresources is a client of the kubelet's PodResources API v1: which
// devices each container holds, and which pods the kubelet has taken in.
package podresources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// ErrUnavailable is returned when the kubelet's PodResources socket is absent.
var ErrUnavailable = errors.New("kubelet PodResources API unavailable")

// Lister lists the kubelet's active pods with the devices each container holds.
type Lister interface {
	List(ctx context.Context) ([]*podresourcesapi.PodResources, error)
}

// Client calls the kubelet's PodResources API v1 on Socket.
type Client struct {
	Socket string
}

// List implements Lister; an absent socket is ErrUnavailable.
func (c Client) List(ctx context.Context) ([]*podresourcesapi.PodResources, error) {
	if _, err := os.Stat(c.Socket); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	abs, err := filepath.Abs(c.Socket)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing pod resources: %w", err)
	}
	return resp.PodResources, nil
}
