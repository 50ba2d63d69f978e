// Command device-plugin serves a node's GPUs to its kubelet over the real device-plugin API
// (v1beta1), as the NVIDIA device plugin does: it listens on a socket in the kubelet's
// device-plugins directory, registers its resource with the kubelet, streams its devices
// (ListAndWatch) and answers Allocate with the devices' IDs in NVIDIA_VISIBLE_DEVICES, what the
// NVIDIA container runtime reads. It registers again whenever the kubelet's socket is made anew
// (a kubelet restart), and ends on SIGTERM, when the kubelet sees its devices go.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
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

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	stop    chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-stream.Context().Done():
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	response := &pluginapi.AllocateResponse{}
	for _, asked := range req.GetContainerRequests() {
		for _, id := range asked.GetDevicesIds() {
			if !p.has(id) {
				return nil, fmt.Errorf("invalid allocation request for %q: unknown device: %s", resourceName, id)
			}
		}
		response.ContainerResponses = append(response.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(asked.GetDevicesIds(), ",")},
		})
	}
	return response, nil
}

func (p *plugin) has(id string) bool {
	for _, device := range p.devices {
		if device.ID == id {
			return true
		}
	}
	return false
}

var resourceName = "nvidia.com/gpu"

func main() {
	dir := flag.String("plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins directory")
	socketName := flag.String("socket", "nvidia-gpu.sock", "this plugin's socket in that directory")
	flag.StringVar(&resourceName, "resource", resourceName, "the extended resource served")
	devices := flag.String("devices", "", "comma-separated IDs of the devices served")
	flag.Parse()
	p := &plugin{stop: make(chan struct{})}
	for _, id := range strings.Split(*devices, ",") {
		p.devices = append(p.devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	// Work in the directory and name the sockets relative to it: a unix socket's path may not
	// exceed 107 bytes, and where the node's directory lies on this host can be deeper.
	if err := os.Chdir(*dir); err != nil {
		log.Fatalf("the kubelet's device-plugins directory: %v", err)
	}
	socket := *socketName
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatalf("listening on %s: %v", socket, err)
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(listener) }()
	kubelet := filepath.Base(pluginapi.KubeletSocket)
	registered := registerWhenNew(kubelet, *socketName, time.Time{})
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	for {
		select {
		case sig := <-signals:
			log.Printf("received signal %q, shutting down", sig)
			close(p.stop)
			server.Stop()
			_ = os.Remove(socket)
			return
		case <-time.After(time.Second):
			registered = registerWhenNew(kubelet, *socketName, registered)
		}
	}
}

// registerWhenNew registers with the kubelet when its socket is newer than the last
// registration (a kubelet that restarted forgets its plugins), and returns when it last did.
func registerWhenNew(kubelet, endpoint string, last time.Time) time.Time {
	info, err := os.Stat(kubelet)
	if err != nil || !info.ModTime().After(last) {
		return last
	}
	conn, err := grpc.NewClient("unix:"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Printf("connecting to the kubelet at %s: %v", kubelet, err)
		return last
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resourceName,
	})
	if err != nil {
		log.Printf("registering %s with the kubelet: %v", resourceName, err)
		return last
	}
	log.Printf("registered device plugin for %q with Kubelet", resourceName)
	return info.ModTime()
}
