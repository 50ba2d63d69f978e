package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// mount is one of a container's mounts: HostPath where this host keeps it; for the kubelet's
// own files, KubeletPath where the kubelet named them (in its mount namespace, where its tmpfs
// volumes are).
type mount struct {
	ContainerPath string `json:"container_path"`
	HostPath      string `json:"host_path"`
	KubeletPath   string `json:"kubelet_path,omitempty"`
	ReadOnly      bool   `json:"read_only,omitempty"`
}

// kubeletRoot is the node's files as the kubelet sees them (/proc/<pid>/root of its mount
// namespace), once it runs: the volumes it mounts there (a pod's ServiceAccount token is a
// tmpfs) are seen from outside only through it.
var kubeletRoot atomic.Value

// container is one container's record and, once started, its process: the --program playing
// its command.
type container struct {
	id        string
	sandboxID string
	network   starter
	pod       *runtimeapi.PodSandboxMetadata
	config    *runtimeapi.ContainerConfig
	image     string // name and tag, as containerd reports it
	imageRef  string // repository@digest
	logPath   string
	dir       string
	program   []string
	extraEnv  []string // the runtime's --program-env
	handler   string   // the runtime handler that runs it
	toolkit   string   // the node's /usr/local/nvidia (empty: no toolkit can install there)
	mounts    []mount
	createdAt int64
	done      chan struct{} // closed once the process ended (or never started and was stopped)

	mu         sync.Mutex
	state      runtimeapi.ContainerState
	startedAt  int64
	finishedAt int64
	exitCode   int32
	reason     string
	message    string
	process    *os.Process
	stdin      io.WriteCloser
	output     *criLog
	claimed    bool // start took it: stop must wait for the process, not end the record
}

// programArgs is how the program is asked to play something in this container.
func (c *container) programArgs(verb string, extra []string, command []string) []string {
	args := append([]string{}, c.program...)
	args = append(args, verb, c.pod.GetNamespace(), c.pod.GetName(), c.config.GetMetadata().GetName(), c.id)
	args = append(args, extra...)
	return append(append(args, "--"), command...)
}

// environment is what the container's process sees: the container's own variables (the pod's
// env, the device plugin's) and where its image and files are.
func (c *container) environment() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "CONTAINER_IMAGE=" + c.image, "CONTAINER_DIR=" + c.dir, "CONTAINER_RUNTIME=" + c.handler}
	if home := os.Getenv("HOME"); home != "" {
		env = append(env, "HOME="+home)
	}
	env = append(env, c.extraEnv...)
	if mounts, err := json.Marshal(c.mounts); err == nil {
		env = append(env, "CONTAINER_MOUNTS="+string(mounts))
	}
	if root, ok := kubeletRoot.Load().(string); ok {
		env = append(env, "KUBELET_ROOT="+root)
	}
	for _, kv := range c.config.GetEnvs() {
		env = append(env, kv.GetKey()+"="+kv.GetValue())
	}
	return env
}

func (c *container) start() error {
	c.mu.Lock()
	if c.state != runtimeapi.ContainerState_CONTAINER_CREATED || c.claimed {
		c.mu.Unlock()
		return fmt.Errorf("container %s is not in created state", c.id)
	}
	c.claimed = true
	c.mu.Unlock()
	failed := func(err error) error {
		c.mu.Lock()
		c.state, c.finishedAt, c.exitCode, c.reason = runtimeapi.ContainerState_CONTAINER_EXITED, time.Now().UnixNano(), 128, "StartError"
		c.message = err.Error()
		c.mu.Unlock()
		close(c.done)
		return err
	}
	command := append(append([]string{}, c.config.GetCommand()...), c.config.GetArgs()...)
	if err := c.prestart(command); err != nil {
		return failed(err)
	}
	output, err := openLog(c.logPath)
	if err != nil {
		return failed(fmt.Errorf("failed to create containerd task: failed to open log %s: %w", c.logPath, err))
	}
	cmd := exec.Command(c.program[0], c.programArgs("run", nil, command)[1:]...)
	cmd.Env = c.environment()
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		output.Close()
		return failed(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		output.Close()
		return failed(err)
	}
	var stdin io.WriteCloser
	if c.config.GetStdin() {
		if stdin, err = cmd.StdinPipe(); err != nil {
			output.Close()
			return failed(err)
		}
	}
	if err := c.network.start(cmd); err != nil {
		output.Close()
		return failed(fmt.Errorf("failed to create containerd task: failed to start %s: %w", c.program[0], err))
	}
	c.mu.Lock()
	c.state = runtimeapi.ContainerState_CONTAINER_RUNNING
	c.startedAt = time.Now().UnixNano()
	c.process, c.stdin, c.output = cmd.Process, stdin, output
	c.mu.Unlock()
	var copied sync.WaitGroup
	copied.Add(2)
	go func() { defer copied.Done(); output.copyFrom("stdout", stdout) }()
	go func() { defer copied.Done(); output.copyFrom("stderr", stderr) }()
	go func() {
		copied.Wait()
		_ = cmd.Wait()
		output.Close()
		c.mu.Lock()
		c.state = runtimeapi.ContainerState_CONTAINER_EXITED
		c.finishedAt = time.Now().UnixNano()
		c.exitCode = int32(exitCode(cmd.ProcessState))
		c.reason = "Completed"
		if c.exitCode != 0 {
			c.reason = "Error"
		}
		c.mu.Unlock()
		close(c.done)
	}()
	return nil
}

// nvidiaHandler is the NVIDIA container runtime's name in the node's containerd.
const nvidiaHandler = "nvidia"

// prestart runs the NVIDIA runtime's prestart hook, as runc runs it before the container's
// process, once the operator's container toolkit has installed itself on the node (the AMI's own
// runtime is not played that far): the program's `prestart` verb decides, and a hook that exits
// non-zero fails the start with what it printed, the error containerd reports.
func (c *container) prestart(command []string) error {
	if c.handler != nvidiaHandler || c.toolkit == "" {
		return nil
	}
	if installed, _ := os.ReadDir(filepath.Join(c.toolkit, "toolkit")); len(installed) == 0 {
		return nil
	}
	hook := exec.Command(c.program[0], c.programArgs("prestart", nil, command)[1:]...)
	hook.Env = c.environment()
	hook.Dir = c.dir
	hook.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var said bytes.Buffer
	hook.Stderr = &said
	if err := c.network.start(hook); err != nil {
		return fmt.Errorf("failed to create containerd task: failed to start the prestart hook: %w", err)
	}
	if err := hook.Wait(); err != nil {
		return errors.New(strings.TrimSpace(said.String()))
	}
	return nil
}

// stop sends SIGTERM to the container's processes, then SIGKILL after timeout (at once for 0),
// and waits for them to end.
func (c *container) stop(timeout time.Duration) {
	c.mu.Lock()
	process, state := c.process, c.state
	if state == runtimeapi.ContainerState_CONTAINER_CREATED && !c.claimed {
		c.state = runtimeapi.ContainerState_CONTAINER_EXITED
		c.finishedAt = time.Now().UnixNano()
		c.reason = "Error"
		close(c.done)
	}
	c.mu.Unlock()
	if process == nil || state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return
	}
	if timeout > 0 {
		_ = syscall.Kill(-process.Pid, syscall.SIGTERM)
		select {
		case <-c.done:
			return
		case <-time.After(timeout):
		}
	}
	_ = syscall.Kill(-process.Pid, syscall.SIGKILL)
	<-c.done
}

func (c *container) remove() {
	_ = os.RemoveAll(c.dir)
}

func (c *container) reopenLog() {
	c.mu.Lock()
	output := c.output
	c.mu.Unlock()
	if output != nil {
		output.reopen()
	}
}

func (c *container) summary() *runtimeapi.Container {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &runtimeapi.Container{
		Id: c.id, PodSandboxId: c.sandboxID, Metadata: c.config.GetMetadata(), Image: &runtimeapi.ImageSpec{Image: c.image},
		ImageRef: c.imageRef, State: c.state, CreatedAt: c.createdAt,
		Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(), ImageId: c.imageRef,
	}
}

func (c *container) status() *runtimeapi.ContainerStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &runtimeapi.ContainerStatus{
		Id: c.id, Metadata: c.config.GetMetadata(), State: c.state,
		CreatedAt: c.createdAt, StartedAt: c.startedAt, FinishedAt: c.finishedAt,
		ExitCode: c.exitCode, Reason: c.reason, Message: c.message,
		Image: &runtimeapi.ImageSpec{Image: c.image}, ImageRef: c.imageRef, ImageId: c.imageRef,
		Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(),
		Mounts: c.config.GetMounts(), LogPath: c.logPath,
		User: &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{}},
	}
}

// stats are the container's process's own CPU time and resident memory, read from /proc.
func (c *container) stats() *runtimeapi.ContainerStats {
	c.mu.Lock()
	process := c.process
	c.mu.Unlock()
	now := time.Now().UnixNano()
	var cpu, memory uint64
	if process != nil {
		cpu, memory = processUsage(process.Pid)
	}
	return &runtimeapi.ContainerStats{
		Attributes:    &runtimeapi.ContainerAttributes{Id: c.id, Metadata: c.config.GetMetadata(), Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations()},
		Cpu:           &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpu}},
		Memory:        &runtimeapi.MemoryUsage{Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{Value: memory}, RssBytes: &runtimeapi.UInt64Value{Value: memory}},
		WritableLayer: &runtimeapi.FilesystemUsage{Timestamp: now, FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: c.dir}, UsedBytes: &runtimeapi.UInt64Value{}, InodesUsed: &runtimeapi.UInt64Value{}},
	}
}

func processUsage(pid int) (cpuNanos, rssBytes uint64) {
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// the fields after the command's closing parenthesis: utime and stime are the 12th and 13th
		if end := bytes.LastIndexByte(stat, ')'); end > 0 {
			fields := strings.Fields(string(stat[end+1:]))
			if len(fields) > 12 {
				user, _ := strconv.ParseUint(fields[11], 10, 64)
				system, _ := strconv.ParseUint(fields[12], 10, 64)
				cpuNanos = (user + system) * uint64(time.Second/100) // USER_HZ is 100
			}
		}
	}
	if statm, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid)); err == nil {
		if fields := strings.Fields(string(statm)); len(fields) > 1 {
			pages, _ := strconv.ParseUint(fields[1], 10, 64)
			rssBytes = pages * uint64(os.Getpagesize())
		}
	}
	return cpuNanos, rssBytes
}

// execSync runs command in the container to its end and returns what it printed.
func (c *container) execSync(ctx context.Context, command []string) (stdout, stderr []byte, code int, err error) {
	args := c.programArgs("exec", nil, command)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = c.environment()
	cmd.Dir = c.dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err = c.network.start(cmd); err == nil {
		err = cmd.Wait()
	}
	var exited *exec.ExitError
	if errors.As(err, &exited) {
		return out.Bytes(), errOut.Bytes(), exitCode(exited.ProcessState), nil
	}
	if ctx.Err() != nil {
		return nil, nil, 0, fmt.Errorf("command %q timed out", strings.Join(command, " "))
	}
	return out.Bytes(), errOut.Bytes(), 0, err
}

// criLog writes a container's output in the CRI log format the kubelet reads
// ("<RFC3339Nano> stdout|stderr F <line>"), and copies it to whoever is attached.
type criLog struct {
	path     string
	mu       sync.Mutex
	file     *os.File
	attached map[chan []byte]bool
}

func openLog(path string) (*criLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	file, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	return &criLog{path: path, file: file, attached: map[chan []byte]bool{}}, nil
}

func (l *criLog) copyFrom(stream string, from io.Reader) {
	reader := bufio.NewReader(from)
	for {
		line, err := reader.ReadBytes('\n')
		if len(line) > 0 {
			l.write(stream, line)
		}
		if err != nil {
			return
		}
	}
}

func (l *criLog) write(stream string, line []byte) {
	text := bytes.TrimSuffix(line, []byte("\n"))
	record := fmt.Sprintf("%s %s F %s\n", time.Now().UTC().Format(time.RFC3339Nano), stream, text)
	l.mu.Lock()
	file := l.file
	var listeners []chan []byte
	for ch := range l.attached {
		listeners = append(listeners, ch)
	}
	l.mu.Unlock()
	if file != nil {
		_, _ = file.WriteString(record)
	}
	for _, ch := range listeners {
		select {
		case ch <- line:
		default: // a slow reader misses output rather than stalling the container
		}
	}
}

// attach returns a channel of the output from now on and a function that ends it.
func (l *criLog) attach() (<-chan []byte, func()) {
	ch := make(chan []byte, 256)
	l.mu.Lock()
	l.attached[ch] = true
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.attached, ch)
		l.mu.Unlock()
	}
}

func (l *criLog) reopen() {
	file, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return
	}
	l.mu.Lock()
	old := l.file
	l.file = file
	l.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

func (l *criLog) Close() {
	l.mu.Lock()
	file := l.file
	l.file = nil
	l.mu.Unlock()
	if file != nil {
		file.Close()
	}
}
