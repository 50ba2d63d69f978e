package main

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// namespace is a network namespace of its own, held by one OS thread that entered it and never
// leaves: what must happen inside it (sockets made there, processes started from there) runs
// on that thread. close ends the thread, and the namespace with its last user.
type namespace struct {
	work chan func()
	tid  int // the thread's ID: /proc/<tid>/ns/net names the namespace
}

func newNamespace() (*namespace, error) {
	n := &namespace{work: make(chan func())}
	entered := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			entered <- fmt.Errorf("unshare: %w", err)
			return
		}
		n.tid = unix.Gettid()
		entered <- nil
		for fn := range n.work {
			fn()
		}
	}()
	if err := <-entered; err != nil {
		return nil, err
	}
	return n, nil
}

// do runs fn on the thread inside the namespace and waits for it.
func (n *namespace) do(fn func()) {
	done := make(chan struct{})
	n.work <- func() { fn(); close(done) }
	<-done
}

func (n *namespace) close() { close(n.work) }

// ip runs the ip tool inside the namespace.
func (n *namespace) ip(args ...string) error {
	var out []byte
	var err error
	n.do(func() { out, err = exec.Command("ip", args...).CombinedOutput() })
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// start starts cmd inside the namespace: a container's process sees its pod's addresses (or the
// node's, for a host-network pod) and reaches the API server through the forwarded port.
func (n *namespace) start(cmd *exec.Cmd) (err error) {
	n.do(func() { err = cmd.Start() })
	return err
}

func (n *namespace) listen(address string) (listener net.Listener, err error) {
	n.do(func() { listener, err = net.Listen("tcp", address) })
	return listener, err
}

func (n *namespace) dial(address string) (conn net.Conn, err error) {
	n.do(func() { conn, err = net.Dial("tcp", address) })
	return conn, err
}

// forwardIn listens on local inside the namespace and forwards each connection to remote,
// dialled from the host's namespace. The listener ends with the namespace's last socket.
func (n *namespace) forwardIn(local, remote string) (net.Listener, error) {
	listener, err := n.listen(local)
	if err != nil {
		return nil, err
	}
	go pipeAll(listener, func() (net.Conn, error) { return net.Dial("tcp", remote) })
	return listener, nil
}

// nodeNetwork is the node's namespace: loopback, and eth0 carrying the node's address (one end
// of a veth pair whose other end, "vpc", stays inside too: some kernels lack the dummy driver).
// Each pod that is not on the host's network gets a namespace of its own, joined to the
// node's by a veth pair as the VPC CNI joins it (the pod's address routed to the node's end,
// which answers ARP for the rest); the API server's port is forwarded into every one.
type nodeNetwork struct {
	*namespace
	forwards [][2]string // (local, remote) ports forwarded into the node and every pod
}

func newNodeNetwork(nodeIP string) (*nodeNetwork, error) {
	ns, err := newNamespace()
	if err != nil {
		return nil, err
	}
	n := &nodeNetwork{namespace: ns}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "eth0", "type", "veth", "peer", "name", "vpc"},
		{"addr", "add", nodeIP + "/32", "dev", "eth0"},
		{"link", "set", "vpc", "up"},
		{"link", "set", "eth0", "up"},
	} {
		if err := n.ip(args...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// forwardAPI forwards local (inside the node, and inside each pod from now on) to the API
// at remote on the host (the API server; the world's AWS endpoint, as an instance reaches AWS).
func (n *nodeNetwork) forwardAPI(local, remote string) error {
	if _, err := n.forwardIn(local, remote); err != nil {
		return fmt.Errorf("--api-forward %s inside the node: %w", local, err)
	}
	n.forwards = append(n.forwards, [2]string{local, remote})
	return nil
}

// podNetwork is one pod's namespace.
type podNetwork struct {
	*namespace
	hostSide string
	apis     []net.Listener
}

// hostSideName names the node's end of a pod's veth pair as the VPC CNI does: "eni" and a
// digest (interface names have at most 15 characters).
func hostSideName(address string) string {
	sum := sha1.Sum([]byte(address))
	return "eni" + hex.EncodeToString(sum[:])[:11]
}

// addPod makes the pod's namespace with its address on eth0, its default route through the
// node, and the API server's port inside.
func (n *nodeNetwork) addPod(address string) (*podNetwork, error) {
	ns, err := newNamespace()
	if err != nil {
		return nil, err
	}
	pod := &podNetwork{namespace: ns, hostSide: hostSideName(address)}
	if err := n.joinPod(pod, address); err != nil {
		n.removePod(pod)
		return nil, err
	}
	return pod, nil
}

func (n *nodeNetwork) joinPod(pod *podNetwork, address string) error {
	steps := []struct {
		in   *namespace
		args []string
	}{
		{n.namespace, []string{"link", "add", pod.hostSide, "type", "veth", "peer", "name", "eth0", "netns", fmt.Sprint(pod.tid)}},
		{n.namespace, []string{"link", "set", pod.hostSide, "up"}},
		{n.namespace, []string{"route", "add", address + "/32", "dev", pod.hostSide}},
		{pod.namespace, []string{"link", "set", "lo", "up"}},
		{pod.namespace, []string{"addr", "add", address + "/32", "dev", "eth0"}},
		{pod.namespace, []string{"link", "set", "eth0", "up"}},
		{pod.namespace, []string{"route", "add", "default", "dev", "eth0"}},
	}
	for _, step := range steps {
		if err := step.in.ip(step.args...); err != nil {
			return err
		}
	}
	// the node's end answers ARP for every address it routes (the node's, other pods')
	var err error
	n.do(func() {
		err = os.WriteFile("/proc/sys/net/ipv4/conf/"+pod.hostSide+"/proxy_arp", []byte("1"), 0o644)
	})
	if err != nil {
		return fmt.Errorf("proxy ARP on %s: %w", pod.hostSide, err)
	}
	for _, forward := range n.forwards {
		api, err := pod.forwardIn(forward[0], forward[1])
		if err != nil {
			return fmt.Errorf("the forwarded port %s inside the pod: %w", forward[0], err)
		}
		pod.apis = append(pod.apis, api)
	}
	return nil
}

// removePod ends the pod's namespace and its veth pair.
func (n *nodeNetwork) removePod(pod *podNetwork) {
	for _, api := range pod.apis {
		api.Close()
	}
	if err := n.ip("link", "del", pod.hostSide); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		log.Printf("pod network: %v", err)
	}
	pod.close()
}

// door listens on a unix socket on the host and forwards each connection to target inside
// the node.
func (n *nodeNetwork) door(socket, target string) error {
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("--kubelet-door %s: %w", socket, err)
	}
	go pipeAll(listener, func() (net.Conn, error) { return n.dial(target) })
	return nil
}

func pipeAll(listener net.Listener, dial func() (net.Conn, error)) {
	for {
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			upstream, err := dial()
			if err != nil {
				log.Printf("forward from %s: %v", listener.Addr(), err)
				return
			}
			defer upstream.Close()
			go func() { _, _ = io.Copy(upstream, conn); upstream.Close() }()
			_, _ = io.Copy(conn, upstream)
		}()
	}
}
