package reconcile

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

// PodResourcesLister lists what the kubelet really handed to each container.
type PodResourcesLister interface {
	List(ctx context.Context) ([]*podresourcesapi.PodResources, error)
}

// PodResourcesClient calls the kubelet's PodResources API v1 on Socket.
type PodResourcesClient struct {
	Socket string
}

// List implements PodResourcesLister; an absent socket is ErrUnavailable.
func (c PodResourcesClient) List(ctx context.Context) ([]*podresourcesapi.PodResources, error) {
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
