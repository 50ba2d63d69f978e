package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubelet/pkg/cri/streaming"
)

// What the node's containerd says it is (the AL2023 NVIDIA AMI's), so container IDs read
// containerd://<64 hex>.
const (
	runtimeName    = "containerd"
	runtimeVersion = "2.2.4"
	criVersion     = "v1"
)

type runtimeOptions struct {
	program        []string
	programEnv     []string // NAME=VALUE: where the program finds what it needs on this host
	nodeIP         string
	pods           *addresses
	network        *nodeNetwork
	handlers       []string
	defaultRuntime string
	stateDir       string
	cniConfDir     string
	routesDir      string
	versionFile    string // the node's containerd version, read at each Version call
	toolkitDir     string // the node's /usr/local/nvidia, where the operator's toolkit installs
	hostPaths      map[string]string
	kubeletDir     string
	images         *imageService
	streams        streaming.Server
}

// starter starts a process in a network namespace: the pod's own, or the node's.
type starter interface {
	start(cmd *exec.Cmd) error
}

type sandbox struct {
	id        string
	config    *runtimeapi.PodSandboxConfig
	handler   string
	ip        string
	network   *podNetwork // nil for a pod on the node's network
	state     runtimeapi.PodSandboxState
	createdAt int64
	doors     []door // its ports, reached from the host
}

// processes is where the sandbox's containers run: its own namespace, or the node's.
func (s *sandbox) processes(node *nodeNetwork) starter {
	if s.network != nil {
		return s.network
	}
	return node
}

type criRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	opts runtimeOptions

	mu         sync.Mutex
	sandboxes  map[string]*sandbox
	containers map[string]*container
}

func newRuntime(opts runtimeOptions) *criRuntime {
	return &criRuntime{opts: opts, sandboxes: map[string]*sandbox{}, containers: map[string]*container{}}
}

func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func notFound(kind, id string) error {
	return status.Errorf(codes.NotFound, "an error occurred when try to find %s %q: not found", kind, id)
}

// Version answers as the node's containerd: its release from --version-file where the machine
// has one (an AMI switched in place ships another containerd), else runtimeVersion.
func (r *criRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	version := runtimeVersion
	if r.opts.versionFile != "" {
		if data, err := os.ReadFile(r.opts.versionFile); err == nil && len(bytes.TrimSpace(data)) > 0 {
			version = string(bytes.TrimSpace(data))
		}
	}
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: runtimeName, RuntimeVersion: version, RuntimeApiVersion: criVersion}, nil
}

func (r *criRuntime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	network := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if r.opts.cniConfDir != "" {
		if !hasCNIConfig(r.opts.cniConfDir) {
			network.Status = false
			network.Reason = "NetworkPluginNotReady"
			network.Message = "Network plugin returns error: cni plugin not initialized"
		}
	}
	var handlers []*runtimeapi.RuntimeHandler
	for _, name := range append([]string{""}, r.opts.handlers...) { // "": the default one
		handlers = append(handlers, &runtimeapi.RuntimeHandler{Name: name, Features: &runtimeapi.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: true}})
	}
	return &runtimeapi.StatusResponse{
		Status:          &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{{Type: runtimeapi.RuntimeReady, Status: true}, network}},
		RuntimeHandlers: handlers,
	}, nil
}

// hasCNIConfig: whether dir holds a network configuration, the files containerd's CNI loader
// reads (.conf, .conflist, .json); until then containerd reports the network not ready.
func hasCNIConfig(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, entry := range entries {
		switch filepath.Ext(entry.Name()) {
		case ".conf", ".conflist", ".json":
			return true
		}
	}
	return false
}

func (r *criRuntime) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS}}, nil
}

func (r *criRuntime) UpdateRuntimeConfig(context.Context, *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// RunPodSandbox gives the pod its address: the node's for a host-network pod, else the next
// free one of the pod CIDR. A handler the node's containerd lacks fails as containerd does.
func (r *criRuntime) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	handler := req.GetRuntimeHandler()
	if handler != "" && !slices.Contains(r.opts.handlers, handler) {
		return nil, status.Errorf(codes.Unknown, "failed to get sandbox runtime: no runtime for %q is configured", handler)
	}
	config := req.GetConfig()
	ip := r.opts.nodeIP
	var network *podNetwork
	if dir := config.GetLogDirectory(); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() != runtimeapi.NamespaceMode_NODE {
		var err error
		if ip, err = r.opts.pods.take(); err != nil {
			return nil, status.Error(codes.ResourceExhausted, err.Error())
		}
		if network, err = r.opts.network.addPod(ip); err != nil {
			r.opts.pods.give(ip)
			return nil, status.Errorf(codes.Unknown, "failed to setup network for sandbox: %v", err)
		}
	}
	s := &sandbox{id: newID(), config: config, handler: handler, ip: ip, network: network, state: runtimeapi.PodSandboxState_SANDBOX_READY, createdAt: time.Now().UnixNano()}
	s.doors = r.openDoors(s)
	r.mu.Lock()
	r.sandboxes[s.id] = s
	r.mu.Unlock()
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: s.id}, nil
}

func (r *criRuntime) sandbox(id string) (*sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.sandboxes[id]; ok {
		return s, nil
	}
	return nil, notFound("sandbox", id)
}

// StopPodSandbox stops the pod's containers and gives its address back.
func (r *criRuntime) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	r.mu.Lock()
	s, ok := r.sandboxes[req.GetPodSandboxId()]
	var running []*container
	for _, c := range r.containers {
		if c.sandboxID == req.GetPodSandboxId() {
			running = append(running, c)
		}
	}
	release := ok && s.state == runtimeapi.PodSandboxState_SANDBOX_READY && s.network != nil
	if ok {
		s.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	r.mu.Unlock()
	for _, c := range running {
		c.stop(0)
	}
	if ok {
		closeDoors(s.doors)
	}
	if release {
		r.opts.network.removePod(s.network)
		r.opts.pods.give(s.ip)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (r *criRuntime) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	if _, err := r.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: req.GetPodSandboxId()}); err != nil {
		return nil, err
	}
	r.mu.Lock()
	delete(r.sandboxes, req.GetPodSandboxId())
	var gone []*container
	for id, c := range r.containers {
		if c.sandboxID == req.GetPodSandboxId() {
			gone = append(gone, c)
			delete(r.containers, id)
		}
	}
	r.mu.Unlock()
	for _, c := range gone {
		c.remove()
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (s *sandbox) status() *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id:             s.id,
		Metadata:       s.config.GetMetadata(),
		State:          s.state,
		CreatedAt:      s.createdAt,
		Network:        &runtimeapi.PodSandboxNetworkStatus{Ip: s.ip},
		Linux:          &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: s.config.GetLinux().GetSecurityContext().GetNamespaceOptions()}},
		Labels:         s.config.GetLabels(),
		Annotations:    s.config.GetAnnotations(),
		RuntimeHandler: s.handler,
	}
}

func (r *criRuntime) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	s, err := r.sandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return &runtimeapi.PodSandboxStatusResponse{Status: s.status()}, nil
}

func matches(labels, selector map[string]string) bool {
	for key, value := range selector {
		if labels[key] != value {
			return false
		}
	}
	return true
}

func (r *criRuntime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	filter := req.GetFilter()
	r.mu.Lock()
	defer r.mu.Unlock()
	var listed []*runtimeapi.PodSandbox
	for _, s := range r.sandboxes {
		if (filter.GetId() != "" && filter.GetId() != s.id) ||
			(filter.GetState() != nil && filter.GetState().GetState() != s.state) ||
			!matches(s.config.GetLabels(), filter.GetLabelSelector()) {
			continue
		}
		listed = append(listed, &runtimeapi.PodSandbox{
			Id: s.id, Metadata: s.config.GetMetadata(), State: s.state, CreatedAt: s.createdAt,
			Labels: s.config.GetLabels(), Annotations: s.config.GetAnnotations(), RuntimeHandler: s.handler,
		})
	}
	sort.Slice(listed, func(i, j int) bool { return listed[i].CreatedAt < listed[j].CreatedAt })
	return &runtimeapi.ListPodSandboxResponse{Items: listed}, nil
}

func (r *criRuntime) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	s, err := r.sandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	config := req.GetConfig()
	asked := config.GetImage().GetUserSpecifiedImage()
	if asked == "" {
		asked = config.GetImage().GetImage()
	}
	image, here := r.opts.images.onNode(asked)
	if !here {
		return nil, status.Errorf(codes.NotFound, "failed to get image %q: image %q: not found", asked, asked)
	}
	c := &container{
		id:        newID(),
		sandboxID: s.id,
		network:   s.processes(r.opts.network),
		pod:       s.config.GetMetadata(),
		config:    config,
		image:     image.Ref,
		imageRef:  repository(image.Ref) + "@" + image.ID,
		logPath:   filepath.Join(s.config.GetLogDirectory(), config.GetLogPath()),
		dir:       filepath.Join(r.opts.stateDir, "containers"),
		program:   r.opts.program,
		extraEnv:  r.opts.programEnv,
		handler:   cmp.Or(s.handler, r.opts.defaultRuntime),
		toolkit:   r.opts.toolkitDir,
		mounts:    hostMounts(config.GetMounts(), r.opts.hostPaths, r.opts.kubeletDir),
		state:     runtimeapi.ContainerState_CONTAINER_CREATED,
		createdAt: time.Now().UnixNano(),
		done:      make(chan struct{}),
	}
	c.dir = filepath.Join(c.dir, c.id)
	if err := writeEtc(filepath.Join(c.dir, "rootfs", "etc"), s.config); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	r.mu.Lock()
	r.containers[c.id] = c
	r.mu.Unlock()
	return &runtimeapi.CreateContainerResponse{ContainerId: c.id}, nil
}

func (r *criRuntime) container(id string) (*container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.containers[id]; ok {
		return c, nil
	}
	return nil, notFound("container", id)
}

func (r *criRuntime) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := r.container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if err := c.start(); err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

func (r *criRuntime) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	c, err := r.container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	c.stop(time.Duration(req.GetTimeout()) * time.Second)
	return &runtimeapi.StopContainerResponse{}, nil
}

func (r *criRuntime) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	c, err := r.container(req.GetContainerId())
	if err != nil {
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	c.stop(0)
	r.mu.Lock()
	delete(r.containers, c.id)
	r.mu.Unlock()
	c.remove()
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (r *criRuntime) ListContainers(_ context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	filter := req.GetFilter()
	r.mu.Lock()
	all := make([]*container, 0, len(r.containers))
	for _, c := range r.containers {
		all = append(all, c)
	}
	r.mu.Unlock()
	var listed []*runtimeapi.Container
	for _, c := range all {
		summary := c.summary()
		if (filter.GetId() != "" && filter.GetId() != c.id) ||
			(filter.GetPodSandboxId() != "" && filter.GetPodSandboxId() != c.sandboxID) ||
			(filter.GetState() != nil && filter.GetState().GetState() != summary.State) ||
			!matches(c.config.GetLabels(), filter.GetLabelSelector()) {
			continue
		}
		listed = append(listed, summary)
	}
	sort.Slice(listed, func(i, j int) bool { return listed[i].CreatedAt < listed[j].CreatedAt })
	return &runtimeapi.ListContainersResponse{Containers: listed}, nil
}

func (r *criRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	c, err := r.container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatusResponse{Status: c.status()}, nil
}

func (r *criRuntime) UpdateContainerResources(context.Context, *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func (r *criRuntime) ReopenContainerLog(_ context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, err := r.container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	c.reopenLog()
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}

// ExecSync runs a command in the container to its end (exec probes, `crictl exec -s`).
func (r *criRuntime) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	c, err := r.container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if req.GetTimeout() > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.GetTimeout())*time.Second)
		defer cancel()
	}
	stdout, stderr, code, err := c.execSync(ctx, req.GetCmd())
	if err != nil {
		return nil, status.Error(codes.Unknown, err.Error())
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout, Stderr: stderr, ExitCode: int32(code)}, nil
}

func (r *criRuntime) Exec(_ context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if _, err := r.running(req.GetContainerId()); err != nil {
		return nil, err
	}
	return r.opts.streams.GetExec(req)
}

func (r *criRuntime) Attach(_ context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if _, err := r.running(req.GetContainerId()); err != nil {
		return nil, err
	}
	return r.opts.streams.GetAttach(req)
}

func (r *criRuntime) PortForward(_ context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if _, err := r.sandbox(req.GetPodSandboxId()); err != nil {
		return nil, err
	}
	return r.opts.streams.GetPortForward(req)
}

func (r *criRuntime) running(id string) (*container, error) {
	c, err := r.container(id)
	if err != nil {
		return nil, err
	}
	if c.summary().State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running", id)
	}
	return c, nil
}

func (r *criRuntime) ContainerStats(_ context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	c, err := r.container(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: c.stats()}, nil
}

func (r *criRuntime) ListContainerStats(_ context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	filter := req.GetFilter()
	r.mu.Lock()
	all := make([]*container, 0, len(r.containers))
	for _, c := range r.containers {
		if (filter.GetId() == "" || filter.GetId() == c.id) && (filter.GetPodSandboxId() == "" || filter.GetPodSandboxId() == c.sandboxID) && matches(c.config.GetLabels(), filter.GetLabelSelector()) {
			all = append(all, c)
		}
	}
	r.mu.Unlock()
	var stats []*runtimeapi.ContainerStats
	for _, c := range all {
		if c.summary().State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			stats = append(stats, c.stats())
		}
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: stats}, nil
}

func (r *criRuntime) ListPodSandboxStats(_ context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	r.mu.Lock()
	var ready []*sandbox
	for _, s := range r.sandboxes {
		if s.state == runtimeapi.PodSandboxState_SANDBOX_READY && (req.GetFilter().GetId() == "" || req.GetFilter().GetId() == s.id) {
			ready = append(ready, s)
		}
	}
	r.mu.Unlock()
	var stats []*runtimeapi.PodSandboxStats
	for _, s := range ready {
		listed, _ := r.ListContainerStats(context.Background(), &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{PodSandboxId: s.id}})
		now := time.Now().UnixNano()
		var cpu, memory uint64
		for _, c := range listed.GetStats() {
			cpu += c.GetCpu().GetUsageCoreNanoSeconds().GetValue()
			memory += c.GetMemory().GetWorkingSetBytes().GetValue()
		}
		stats = append(stats, &runtimeapi.PodSandboxStats{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: s.id, Metadata: s.config.GetMetadata(), Labels: s.config.GetLabels(), Annotations: s.config.GetAnnotations()},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:        &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpu}},
				Memory:     &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{Value: memory}},
				Containers: listed.GetStats(),
			},
		})
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: stats}, nil
}

// stopAll ends every container's process: the node is going away.
func (r *criRuntime) stopAll() {
	r.mu.Lock()
	all := make([]*container, 0, len(r.containers))
	for _, c := range r.containers {
		all = append(all, c)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Add(1)
		go func() { defer wg.Done(); c.stop(2 * time.Second) }()
	}
	wg.Wait()
}

// writeEtc gives the container's own files what containerd writes into every container: its
// hostname and the pod's DNS settings.
func writeEtc(etc string, config *runtimeapi.PodSandboxConfig) error {
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	dns := config.GetDnsConfig()
	var resolv strings.Builder
	if len(dns.GetSearches()) > 0 {
		fmt.Fprintf(&resolv, "search %s\n", strings.Join(dns.GetSearches(), " "))
	}
	for _, server := range dns.GetServers() {
		fmt.Fprintf(&resolv, "nameserver %s\n", server)
	}
	if len(dns.GetOptions()) > 0 {
		fmt.Fprintf(&resolv, "options %s\n", strings.Join(dns.GetOptions(), " "))
	}
	if err := os.WriteFile(filepath.Join(etc, "hostname"), []byte(config.GetHostname()+"\n"), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte(resolv.String()), 0o644)
}

// hostMounts are the container's mounts with the node's paths where this host keeps them. A
// node path that does not exist yet is made a directory, as containerd makes a missing bind
// source on its node (two pods' hostPath volumes then share it, whichever starts first). One
// in kubeletDir also keeps the path the kubelet named it by.
func hostMounts(mounts []*runtimeapi.Mount, hostPaths map[string]string, kubeletDir string) []mount {
	var mapped []mount
	for _, m := range mounts {
		host := m.GetHostPath()
		for node, here := range hostPaths {
			if under(host, node) {
				host = here + strings.TrimPrefix(host, node)
				if _, err := os.Stat(host); errors.Is(err, os.ErrNotExist) {
					_ = os.MkdirAll(host, 0o755)
				}
			}
		}
		made := mount{ContainerPath: m.GetContainerPath(), HostPath: host, ReadOnly: m.GetReadonly()}
		if kubeletDir != "" && under(m.GetHostPath(), kubeletDir) {
			made.KubeletPath = m.GetHostPath()
		}
		mapped = append(mapped, made)
	}
	return mapped
}

// under says whether path is dir or inside it.
func under(path, dir string) bool {
	rest, found := strings.CutPrefix(path, dir)
	return found && (rest == "" || strings.HasPrefix(rest, "/"))
}

// door is one pod port reached from the host: the node endpoint's route to the pod's
// address and port names an abstract unix socket of the runtime's, which dials the port from
// the node's namespace (as a VPC address is reached from the control plane on EKS).
type door struct {
	route    string
	listener net.Listener
}

// openDoors makes a door for each TCP port the pod's containers declare (the kubelet passes
// them all as the sandbox's port mappings), so the API server's proxy and Prometheus reach
// them by the pod's address. None without --routes-dir.
func (r *criRuntime) openDoors(s *sandbox) []door {
	if r.opts.routesDir == "" {
		return nil
	}
	var doors []door
	for _, mapping := range s.config.GetPortMappings() {
		if mapping.GetProtocol() != runtimeapi.Protocol_TCP {
			continue
		}
		port := mapping.GetContainerPort()
		target := net.JoinHostPort(s.ip, fmt.Sprint(port))
		name := fmt.Sprintf("@eks-gpu-lab-%s-%s", s.id[:16], target)
		listener, err := net.Listen("unix", name)
		if err != nil {
			log.Printf("pod %s port %d: %v", s.config.GetMetadata().GetName(), port, err)
			continue
		}
		go pipeAll(listener, func() (net.Conn, error) { return r.opts.network.dial(target) })
		route := filepath.Join(r.opts.routesDir, fmt.Sprintf("%s_%d", s.ip, port))
		if err := os.WriteFile(route, []byte("unix:"+name), 0o644); err != nil {
			log.Printf("pod %s port %d: %v", s.config.GetMetadata().GetName(), port, err)
		}
		doors = append(doors, door{route: route, listener: listener})
	}
	return doors
}

func closeDoors(doors []door) {
	for _, d := range doors {
		_ = os.Remove(d.route)
		_ = d.listener.Close()
	}
}
