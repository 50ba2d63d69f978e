// Command device-plugin serves a node's GPUs to its kubelet over the real device-plugin API
// (v1beta1), as the NVIDIA device plugin does: it listens on a socket in the kubelet's
// device-plugins directory, registers its resource with the kubelet, streams its devices
// (ListAndWatch) and answers Allocate with the devices' IDs in NVIDIA_VISIBLE_DEVICES, what the
// NVIDIA container runtime reads. It registers again whenever the kubelet's socket is made anew
// (a kubelet restart), and ends on SIGTERM, when the kubelet sees its devices go.
//
// A GPU that falls off the bus is told by NVML on a real node; here by the node's mark in the
// API (--lost-annotation on the Node, which the lab's world sets as the hardware fault): the
// plugin then logs the Xid as k8s-device-plugin v0.17.4's health check does and streams the
// device Unhealthy, so the kubelet keeps its capacity and drops its allocatable to 0.
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	mu      sync.Mutex
	devices []*pluginapi.Device
	changed chan struct{} // closed when the devices' health changes, then made anew
	stop    chan struct{}
}

// snapshot is the devices as they stand and the channel closed at their next change.
func (p *plugin) snapshot() ([]*pluginapi.Device, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	devices := make([]*pluginapi.Device, len(p.devices))
	for i, device := range p.devices {
		devices[i] = &pluginapi.Device{ID: device.ID, Health: device.Health}
	}
	return devices, p.changed
}

// markUnhealthy marks every device unhealthy after an Xid; false when they already were.
func (p *plugin) markUnhealthy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.devices) == 0 || p.devices[0].Health == pluginapi.Unhealthy {
		return false
	}
	for _, device := range p.devices {
		device.Health = pluginapi.Unhealthy
	}
	close(p.changed)
	p.changed = make(chan struct{})
	return true
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		devices, changed := p.snapshot()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devices}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-p.stop:
			return nil
		case <-stream.Context().Done():
			return nil
		}
	}
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
	p.mu.Lock()
	defer p.mu.Unlock()
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
	node := flag.String("node", "", "the node whose mark says its GPU fell off the bus")
	lostAnnotation := flag.String("lost-annotation", "", "the Node annotation holding that Xid")
	apiURL := flag.String("api-url", "", "the API server to read the node from")
	pki := flag.String("pki", "", "a directory with ca.crt, admin.crt and admin.key for it")
	flag.Parse()
	p := &plugin{stop: make(chan struct{}), changed: make(chan struct{})}
	for _, id := range strings.Split(*devices, ",") {
		p.devices = append(p.devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if *node != "" && *lostAnnotation != "" {
		config := &rest.Config{Host: *apiURL, TLSClientConfig: rest.TLSClientConfig{
			CAFile:   filepath.Join(*pki, "ca.crt"),
			CertFile: filepath.Join(*pki, "admin.crt"),
			KeyFile:  filepath.Join(*pki, "admin.key"),
		}}
		if err := watchHealth(config, *node, *lostAnnotation, p); err != nil {
			log.Fatalf("watching node %s for a lost GPU: %v", *node, err)
		}
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

// watchHealth watches `node` and, once `annotation` names an Xid, logs it as the real plugin's
// health check and ListAndWatch do (k8s-device-plugin v0.17.4 internal/rm/health.go:186,
// internal/plugin/server.go:276) and streams every device Unhealthy.
func watchHealth(config *rest.Config, node, annotation string, p *plugin) error {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(options *metav1.ListOptions) {
			options.FieldSelector = "metadata.name=" + node
		}))
	seen := func(obj interface{}) {
		current, ok := obj.(*corev1.Node)
		if !ok {
			return
		}
		xid, err := strconv.Atoi(current.Annotations[annotation])
		if err != nil || xid <= 0 || !p.markUnhealthy() {
			return
		}
		devices, _ := p.snapshot()
		for _, device := range devices {
			klogAt("health.go:186", "XidCriticalError: Xid=%d on Device=%s; marking device as unhealthy.", xid, device.ID)
			klogAt("server.go:276", "'%s' device marked unhealthy: %s", resourceName, device.ID)
		}
	}
	_, err = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj interface{}) { seen(obj) },
	})
	if err != nil {
		return err
	}
	factory.Start(p.stop)
	return nil
}

// klogAt writes one klog info line as the real plugin's source at `where` writes it.
func klogAt(where, format string, args ...interface{}) {
	now := time.Now().UTC()
	fmt.Fprintf(os.Stderr, "I%s %7d %s] %s\n", now.Format("0102 15:04:05.000000"), 1, where, fmt.Sprintf(format, args...))
}
