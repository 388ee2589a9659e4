package podresources_test

import (
	"context"
	"net"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gantryhq/gantry/internal/agent"
	"github.com/gantryhq/gantry/internal/podresources"
	"github.com/gantryhq/gantry/internal/telemetry"
)

// kubelet serves the real v1 PodResources API, as the kubelet does.
type kubelet struct {
	v1.UnimplementedPodResourcesListerServer
	pods []*v1.PodResources
}

func (k *kubelet) List(context.Context, *v1.ListPodResourcesRequest) (*v1.ListPodResourcesResponse, error) {
	return &v1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func TestList(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	v1.RegisterPodResourcesListerServer(srv, &kubelet{pods: []*v1.PodResources{
		{Name: "train-abcde", Namespace: "gantry-vision", Containers: []*v1.ContainerResources{
			{Name: "main", Devices: []*v1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-1", "GPU-2"}}}},
			{Name: "sidecar"}, // no devices: not listed
		}},
		{Name: "nb-0", Namespace: "gantry-nlp", Containers: []*v1.ContainerResources{
			{Name: "notebook", Devices: []*v1.ContainerDevices{{ResourceName: "nvidia.com/mig-1g.10gb", DeviceIds: []string{"MIG-a"}}}},
		}},
	}})
	go srv.Serve(ln)
	defer srv.Stop()
	c, err := podresources.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.PodDevices{
		{Pod: telemetry.PodRef{Namespace: "gantry-vision", Name: "train-abcde", Container: "main"}, Resources: map[string][]string{"nvidia.com/gpu": {"GPU-1", "GPU-2"}}},
		{Pod: telemetry.PodRef{Namespace: "gantry-nlp", Name: "nb-0", Container: "notebook"}, Resources: map[string][]string{"nvidia.com/mig-1g.10gb": {"MIG-a"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	srv.Stop()
	if _, err := c.List(context.Background()); err == nil {
		t.Fatal("a kubelet that went away must be an error")
	}
}
