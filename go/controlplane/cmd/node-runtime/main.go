// Command node-runtime is one rehearsal node: it holds the node's network namespace, serves
// the CRI (the container runtime the node's real kubelet talks to, in containerd's words) and
// starts that kubelet inside the namespace, in a mount namespace of its own.
//
// The node's network namespace has loopback and eth0, carrying the node's VPC address
// (--node-ip), one end of a veth pair whose other end ("vpc") stays in the namespace too (a
// veth is there where a kernel lacks the dummy driver): the kubelet needs a non-loopback address
// of its own, and the host's interfaces are never touched. Each pod not on the host's network
// has a namespace of its own, joined to the node's by a veth pair (network.go), where its
// containers' processes run. Two doors cross them, both made here because a socket keeps the
// namespace it was made in:
//
//   - --api-forward LOCAL=REMOTE (repeat): LOCAL (host:port inside the node, and inside each
//     pod) forwards to REMOTE on the host's loopback: the API server the kubelet's kubeconfig
//     names, and the world's AWS endpoint, which the node's programs call as instances call AWS;
//   - --kubelet-door PATH: a unix socket on the host whose connections go to the kubelet's
//     port on the node's address (the API server's egress reaches the kubelet through it).
//
// A container under the nvidia handler first runs `<program...> prestart ...` (same arguments as
// run) once the operator's toolkit has installed itself in --toolkit-dir: a non-zero exit fails
// its start with what the hook printed (StartError, 128), as runc fails on a failing hook.
//
// Containers run the host program --program (repeat the flag, one argument each) as
// `<program...> run <namespace> <pod> <container> <container-id> -- <command...>`, its stdout and
// stderr written to the container's log in the CRI format, its exit code the container's. Its
// environment has the container's variables, CONTAINER_IMAGE, CONTAINER_DIR (the container's
// own files), CONTAINER_RUNTIME (the runtime handler that runs it), each --program-env,
// CONTAINER_MOUNTS (JSON: each mount's container_path, host_path and read_only, the
// node's paths that --host-path-map names given as this host's) and KUBELET_ROOT (the files as
// the kubelet's mount namespace has them, where its tmpfs volumes are).
// exec, attach and port-forward go through the kubelet's streaming library, exec running
// `<program...> exec <namespace> <pod> <container> <container-id> [--tty] -- <command...>`.
//
// The runtime dies with the process that started it, and the kubelet with the runtime.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// argList collects a repeated flag, one argument per occurrence, so paths with spaces survive.
type argList []string

func (a *argList) String() string     { return strings.Join(*a, " ") }
func (a *argList) Set(v string) error { *a = append(*a, v); return nil }

func main() {
	var program, programEnv, hostPaths, apiForwards argList
	criSocket := flag.String("cri-socket", "", "unix socket serving the CRI (the kubelet's containerRuntimeEndpoint)")
	nodeIP := flag.String("node-ip", "", "the node's address, on eth0 inside its network namespace")
	podCIDR := flag.String("pod-cidr", "", "the addresses pods get (never two alike); host-network pods get the node's")
	images := flag.String("images", "", "JSON catalogue of the images a registry serves and those already on the node")
	handlers := flag.String("runtime-handlers", "runc", "comma-separated runtime handlers the node's containerd has (RuntimeClass handlers)")
	defaultRuntime := flag.String("default-runtime", "runc", "the handler a pod without a RuntimeClass gets (containerd's default_runtime_name)")
	stateDir := flag.String("state-dir", "", "where the runtime keeps each container's files")
	cniConfDir := flag.String("cni-conf-dir", "", "the node's /etc/cni/net.d: the pod network is ready once a CNI config is in it (empty: at once)")
	kubeletDoor := flag.String("kubelet-door", "", "unix socket on the host forwarding to the kubelet's port on the node's address")
	kubeletPort := flag.Int("kubelet-port", 10250, "the kubelet's port, the door's far end")
	versionFile := flag.String("version-file", "", "a file holding the containerd release the node reports (default "+runtimeVersion+")")
	toolkitDir := flag.String("toolkit-dir", "", "the node's /usr/local/nvidia on this host: once the operator's toolkit installs there, containers under the nvidia handler run its prestart hook")
	routesDir := flag.String("routes-dir", "", "the node endpoint's routes: <ip>_<port> files naming where each pod port is reached (none if empty)")
	portsDir := flag.String("ports-dir", "", "directory of <namespace>_<pod>/<port> files holding the host:port a port-forward reaches")
	flag.Var(&apiForwards, "api-forward", "LOCAL=REMOTE: LOCAL inside the node forwards to REMOTE on the host (repeat)")
	flag.Var(&program, "program", "the host program containers run (repeat, one argument each)")
	flag.Var(&programEnv, "program-env", "NAME=VALUE in the program's environment, beside the container's own (repeat)")
	flag.Var(&hostPaths, "host-path-map", "NODE=HOST: the node's path NODE is HOST on this host (repeat)")
	kubeletDir := flag.String("kubelet-dir", "", "the kubelet's --root-dir: its files there (a Secret's tmpfs) are read through its mount namespace, at the path it names")
	flag.Parse()
	kubelet := flag.Args()
	if *criSocket == "" || *nodeIP == "" || *podCIDR == "" || *images == "" || *stateDir == "" || len(program) == 0 {
		log.Fatal("--cri-socket, --node-ip, --pod-cidr, --images, --state-dir and --program are required")
	}
	dieWithParent()
	catalogue, err := loadCatalogue(*images)
	if err != nil {
		log.Fatal(err)
	}
	node, err := newNodeNetwork(*nodeIP)
	if err != nil {
		log.Fatalf("the node's network namespace: %v", err)
	}
	pods, err := newAddresses(*podCIDR, *nodeIP)
	if err != nil {
		log.Fatal(err)
	}
	streams, err := node.streamingServer()
	if err != nil {
		log.Fatalf("the streaming server: %v", err)
	}
	imageDir := filepath.Join(*stateDir, "images")
	if err := os.MkdirAll(imageDir, 0o755); err != nil {
		log.Fatal(err)
	}
	imageStore := newImages(catalogue, imageDir)
	cri := newRuntime(runtimeOptions{
		program:        program,
		programEnv:     programEnv,
		nodeIP:         *nodeIP,
		pods:           pods,
		network:        node,
		handlers:       strings.Split(*handlers, ","),
		defaultRuntime: *defaultRuntime,
		stateDir:       *stateDir,
		cniConfDir:     *cniConfDir,
		routesDir:      *routesDir,
		versionFile:    *versionFile,
		toolkitDir:     *toolkitDir,
		hostPaths:      pathMap(hostPaths),
		kubeletDir:     *kubeletDir,
		images:         imageStore,
		streams:        streams,
	})
	streams.bind(cri, *portsDir)
	served, err := serveCRI(*criSocket, cri, imageStore)
	if err != nil {
		log.Fatal(err)
	}
	defer served.Stop()
	for _, forward := range apiForwards {
		local, remote, found := strings.Cut(forward, "=")
		if !found {
			log.Fatalf("--api-forward %q: want LOCAL=REMOTE", forward)
		}
		if err := node.forwardAPI(local, remote); err != nil {
			log.Fatal(err)
		}
	}
	if *kubeletDoor != "" {
		target := net.JoinHostPort(*nodeIP, fmt.Sprint(*kubeletPort))
		if err := node.door(*kubeletDoor, target); err != nil {
			log.Fatal(err)
		}
	}
	log.Printf("node %s: CRI on %s, pods from %s", *nodeIP, *criSocket, *podCIDR)
	if len(kubelet) == 0 {
		waitForSignal()
		cri.stopAll()
		return
	}
	code := node.runKubelet(kubelet)
	cri.stopAll()
	os.Exit(code)
}

func pathMap(pairs []string) map[string]string {
	mapped := map[string]string{}
	for _, pair := range pairs {
		node, host, found := strings.Cut(pair, "=")
		if !found {
			log.Fatalf("--host-path-map %q: want NODE=HOST", pair)
		}
		mapped[filepath.Clean(node)] = filepath.Clean(host)
	}
	return mapped
}

// dieWithParent: the node goes when the lab's backend goes, even under kill -9.
func dieWithParent() {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		log.Fatalf("prctl: %v", err)
	}
	if os.Getppid() == 1 {
		log.Fatal("started by a process that is already gone")
	}
}

func waitForSignal() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
}

func serveCRI(socket string, cri *criRuntime, images *imageService) (*grpc.Server, error) {
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("the CRI socket: %w", err)
	}
	server := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(server, cri)
	runtimeapi.RegisterImageServiceServer(server, images)
	go func() {
		if err := server.Serve(listener); err != nil {
			log.Fatalf("CRI: %v", err)
		}
	}()
	return server, nil
}

// runKubelet starts the kubelet command inside the node's network namespace and a private
// mount namespace (the command's own mounts stay there), passes SIGTERM and SIGINT on, and
// returns its exit code.
func (n *nodeNetwork) runKubelet(command []string) int {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNS,
		Pdeathsig:    syscall.SIGKILL,
		Setpgid:      true,
	}
	var err error
	n.do(func() { err = cmd.Start() })
	if err != nil {
		log.Printf("starting the kubelet: %v", err)
		return 1
	}
	kubeletRoot.Store(fmt.Sprintf("/proc/%d/root", cmd.Process.Pid))
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for sig := range signals {
			_ = syscall.Kill(-cmd.Process.Pid, sig.(syscall.Signal))
		}
	}()
	err = cmd.Wait()
	if cmd.ProcessState == nil {
		log.Printf("the kubelet: %v", err)
		return 1
	}
	log.Printf("the kubelet ended: %v", cmd.ProcessState)
	return exitCode(cmd.ProcessState)
}

// exitCode as a shell reports it: 128 plus the signal for a process a signal ended.
func exitCode(state *os.ProcessState) int {
	if status, ok := state.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		return 128 + int(status.Signal())
	}
	return state.ExitCode()
}
