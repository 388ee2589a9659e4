package podresources_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gantryhq/gantry/internal/node/agent"
	"github.com/gantryhq/gantry/internal/node/podresources"
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
	// The kubelet's pod log directory: <namespace>_<name>_<uid>. nb-0 was
	// recreated and its old directory is still there: the newer one counts.
	logs := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for name, mod := range map[string]time.Time{
		"gantry-vision_train-abcde_3f0c2a8e-1111-4a4a-9b9b-000000000001": old,
		"gantry-nlp_nb-0_3f0c2a8e-2222-4a4a-9b9b-000000000002":           old.Add(-time.Hour),
		"gantry-nlp_nb-0_3f0c2a8e-3333-4a4a-9b9b-000000000003":           old,
		"not-a-pod": old,
	} {
		if err := os.Mkdir(filepath.Join(logs, name), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(filepath.Join(logs, name), mod, mod)
	}
	c.PodLogs = logs
	got, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.PodDevices{
		{Pod: telemetry.PodRef{Namespace: "gantry-vision", Name: "train-abcde", Container: "main"}, UID: "3f0c2a8e-1111-4a4a-9b9b-000000000001",
			Resources: map[string][]string{"nvidia.com/gpu": {"GPU-1", "GPU-2"}}},
		{Pod: telemetry.PodRef{Namespace: "gantry-nlp", Name: "nb-0", Container: "notebook"}, UID: "3f0c2a8e-3333-4a4a-9b9b-000000000003",
			Resources: map[string][]string{"nvidia.com/mig-1g.10gb": {"MIG-a"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Without the log directory: the same answer without UIDs.
	c.PodLogs = filepath.Join(logs, "missing")
	if got, err = c.List(context.Background()); err != nil || got[0].UID != "" || got[1].UID != "" {
		t.Fatalf("without pod logs: %+v %v", got, err)
	}
	srv.Stop()
	if _, err := c.List(context.Background()); err == nil {
		t.Fatal("a kubelet that went away must be an error")
	}
}
