package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/kubelet/pkg/cri/streaming"
	utilexec "k8s.io/utils/exec"
)

// streamingServer serves exec, attach and port-forward with the kubelet's streaming library on
// loopback inside the node, where the kubelet proxies its clients' streams to it.
func (n *nodeNetwork) streamingServer() (*lateBound, error) {
	listener, err := n.listen("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	config := streaming.DefaultConfig
	config.Addr = listener.Addr().String()
	config.BaseURL = &url.URL{Scheme: "http", Host: config.Addr}
	streams := &streamRuntime{}
	server, err := streaming.NewServer(config, streams)
	if err != nil {
		return nil, err
	}
	go func() { log.Fatal(http.Serve(listener, server)) }()
	return &lateBound{Server: server, runtime: streams}, nil
}

// lateBound lets the CRI runtime, made after the streaming server, answer its calls.
type lateBound struct {
	streaming.Server
	runtime *streamRuntime
}

func (l *lateBound) bind(r *criRuntime, portsDir string) {
	l.runtime.cri, l.runtime.portsDir = r, portsDir
}

type streamRuntime struct {
	cri      *criRuntime
	portsDir string
}

// codeExit carries a command's exit code back through the streaming library to kubectl.
type codeExit struct{ code int }

func (e codeExit) Error() string   { return fmt.Sprintf("command terminated with exit code %d", e.code) }
func (e codeExit) String() string  { return e.Error() }
func (e codeExit) Exited() bool    { return true }
func (e codeExit) ExitStatus() int { return e.code }

var _ utilexec.ExitError = codeExit{}

func (s *streamRuntime) Exec(ctx context.Context, containerID string, command []string, in io.Reader, out, errOut io.WriteCloser, tty bool, _ <-chan remotecommand.TerminalSize) error {
	c, err := s.cri.running(containerID)
	if err != nil {
		return err
	}
	var extra []string
	if tty {
		extra = []string{"--tty"}
	}
	args := c.programArgs("exec", extra, command)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env, cmd.Dir = c.environment(), c.dir
	cmd.Stdin, cmd.Stdout = in, out
	cmd.Stderr = errOut
	if tty || errOut == nil {
		cmd.Stderr = out
	}
	if err = c.network.start(cmd); err == nil {
		err = cmd.Wait()
	}
	var exited *exec.ExitError
	if errors.As(err, &exited) {
		if code := exitCode(exited.ProcessState); code != 0 {
			return codeExit{code}
		}
		return nil
	}
	return err
}

// Attach joins the container's process: its output from now on, and the stream's input as
// its stdin when it was started with one; it lasts until the process ends or the client goes.
func (s *streamRuntime) Attach(ctx context.Context, containerID string, in io.Reader, out, errOut io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
	c, err := s.cri.running(containerID)
	if err != nil {
		return err
	}
	c.mu.Lock()
	output, stdin := c.output, c.stdin
	c.mu.Unlock()
	lines, detach := output.attach()
	defer detach()
	if in != nil && stdin != nil {
		go func() { _, _ = io.Copy(stdin, in) }()
	}
	for {
		select {
		case line := <-lines:
			if out != nil {
				if _, err := out.Write(line); err != nil {
					return nil
				}
			}
		case <-c.done:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// PortForward dials what the world put behind the pod's port: <ports-dir>/<namespace>_<pod>/<port>
// holds the "host:port" on the host.
// dialPort reaches the pod's port: where the ports directory says (a server the world runs
// on the host for the pod), else localhost inside the pod's own namespace, as containerd does.
func (s *streamRuntime) dialPort(ctx context.Context, sb *sandbox, port int32) (net.Conn, error) {
	meta := sb.config.GetMetadata()
	if s.portsDir != "" {
		file := filepath.Join(s.portsDir, meta.GetNamespace()+"_"+meta.GetName(), fmt.Sprint(port))
		if address, err := os.ReadFile(file); err == nil {
			var dialer net.Dialer
			return dialer.DialContext(ctx, "tcp", strings.TrimSpace(string(address)))
		}
	}
	if sb.network == nil {
		return nil, errors.New("connection refused")
	}
	return sb.network.dial(fmt.Sprintf("127.0.0.1:%d", port))
}

func (s *streamRuntime) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	sb, err := s.cri.sandbox(podSandboxID)
	if err != nil {
		return err
	}
	conn, err := s.dialPort(ctx, sb, port)
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside namespace %q: %w", port, podSandboxID, err)
	}
	defer conn.Close()
	go func() { _, _ = io.Copy(conn, stream); conn.Close() }()
	_, _ = io.Copy(stream, conn)
	return nil
}
