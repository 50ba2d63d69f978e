// Command node-endpoint is the one kubelet endpoint every simulated node of the rehearsal
// points at (status.daemonEndpoints.kubeletEndpoint.Port): it serves the kubelet's paths for
// `kubectl logs`, `exec`, `attach` and `port-forward` with the kubelet's own streaming code
// (k8s.io/kubelet/pkg/cri/streaming), so the API server talks to it exactly as to a kubelet.
//
// There are no containers behind it. What a container "is" comes from the rehearsal's files:
//
//   - logs: <logs-dir>/<namespace>_<pod>/<container>.log, in the CRI log format the kubelet
//     reads ("<RFC3339Nano> stdout|stderr F|P <text>"), and <container>.previous.log, the
//     last ended run's, for `--previous`;
//   - exec and attach: the host program given by --exec-command (repeat the flag, one argument
//     each), run as `<exec-command...> exec <namespace> <pod> <container> [--tty] -- <cmd...>`
//     or `<exec-command...> attach <namespace> <pod> <container> [--tty]`, with the stream's
//     stdin/stdout/stderr as its own; its exit code is the command's. No terminal is allocated
//     and resizes are ignored;
//   - port-forward: <ports-dir>/<namespace>_<pod>/<port> holds the "host:port" to dial;
//   - /metrics/resource (what metrics-server scrapes): <metrics-dir>/<node IP>.prom, the
//     Prometheus text the world wrote for the node whose address the request was sent to.
//
// It is also the network between the control plane and the nodes: an HTTP CONNECT proxy
// (--connect-socket for the API server's egress selector, --connect-listen for programs that
// take HTTPS_PROXY) that sends a tunnel to an address named in --routes-dir there
// (<routes-dir>/<host>_<port> holds the "host:port" behind it, as kube-proxy maps a Service's
// virtual IP and the pod network a pod's IP, or "unix:<socket>" for a real kubelet's node),
// ends one to any other node's kubelet port here, and dials
// only loopback addresses beside. On --connect-listen it also forwards plain-HTTP proxy
// requests to routed addresses (a program whose http proxy is the pod network).
//
// Like a kubelet with x509 authentication and anonymous access off, every path but /healthz
// needs a client certificate signed by --client-ca-file (the API server's kubelet client
// certificate); any such certificate may do anything (there is no authorization step).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	remotecommandconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
	remotecommandserver "k8s.io/kubelet/pkg/cri/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// The kubelet's defaults (its streaming server's DefaultConfig).
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommandconsts.DefaultStreamCreationTimeout
	// How often a followed log file is looked at again (the kubelet waits on fsnotify).
	followPoll = 100 * time.Millisecond
)

// argList collects a repeated flag, one argument per occurrence, so paths with spaces survive.
type argList []string

func (a *argList) String() string     { return strings.Join(*a, " ") }
func (a *argList) Set(v string) error { *a = append(*a, v); return nil }

type server struct {
	execCommand []string
	logsDir     string
	portsDir    string
	metricsDir  string
}

func main() {
	var s server
	var execCommand argList
	listen := flag.String("listen", "127.0.0.1:10250", "HOST:PORT to serve HTTPS on")
	certFile := flag.String("tls-cert-file", "", "serving certificate (PEM)")
	keyFile := flag.String("tls-private-key-file", "", "serving key (PEM)")
	caFile := flag.String("client-ca-file", "", "CA that signs the client certificates it accepts")
	flag.Var(&execCommand, "exec-command", "program (then its leading arguments, one per flag) that runs exec and attach")
	flag.StringVar(&s.logsDir, "logs-dir", "", "directory of <namespace>_<pod>/<container>.log files")
	flag.StringVar(&s.portsDir, "ports-dir", "", "directory of <namespace>_<pod>/<port> files holding host:port")
	flag.StringVar(&s.metricsDir, "metrics-dir", "", "directory of <node IP>.prom files served as /metrics/resource")
	connectSocket := flag.String("connect-socket", "", "unix socket for the API server's egress (HTTP CONNECT): tunnels to any node's kubelet port reach this endpoint")
	connectListen := flag.String("connect-listen", "", "HOST:PORT serving the same CONNECT proxy over TCP (for HTTPS_PROXY)")
	routesDir := flag.String("routes-dir", "", "directory of <host>_<port> files holding the host:port a CONNECT to that address reaches")
	kubeletPort := flag.String("kubelet-port", "10250", "the nodes' kubelet port that --connect-socket tunnels here")
	flag.Parse()
	if *certFile == "" || *keyFile == "" || *caFile == "" || len(execCommand) == 0 || s.logsDir == "" || s.portsDir == "" {
		log.Fatal("--tls-cert-file, --tls-private-key-file, --client-ca-file, --exec-command, --logs-dir and --ports-dir are required")
	}
	s.execCommand = execCommand
	caPEM, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	if !clientCAs.AppendCertsFromPEM(caPEM) {
		log.Fatalf("no certificate in %s", *caFile)
	}
	httpServer := &http.Server{
		Addr:    *listen,
		Handler: logged(s.routes()),
		// A certificate, when given, must be the CA's; none at all is refused per request (401)
		// so that /healthz answers anyone, like the kubelet's separate healthz port.
		TLSConfig:         &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: clientCAs, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second,
	}
	if *connectSocket != "" || *connectListen != "" {
		tunnels := newTunnelListener()
		go func() { log.Fatal(httpServer.ServeTLS(tunnels, *certFile, *keyFile)) }()
		proxy := connectProxy(*kubeletPort, *routesDir, tunnels)
		for network, address := range map[string]string{"unix": *connectSocket, "tcp": *connectListen} {
			if address != "" {
				go func() { log.Fatal(serveConnect(network, address, proxy)) }()
				log.Printf("node endpoint tunnelling CONNECT *:%s from %s:%s", *kubeletPort, network, address)
			}
		}
	}
	log.Printf("node endpoint serving on https://%s", *listen)
	log.Fatal(httpServer.ListenAndServeTLS(*certFile, *keyFile))
}

// tunnelListener hands the connections CONNECT tunnelled to the HTTPS server, as if they
// had been accepted from the nodes' addresses.
type tunnelListener struct {
	conns  chan net.Conn
	closed chan struct{}
}

func newTunnelListener() *tunnelListener {
	return &tunnelListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *tunnelListener) Accept() (net.Conn, error) {
	select {
	case conn := <-l.conns:
		return conn, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *tunnelListener) Close() error   { close(l.closed); return nil }
func (l *tunnelListener) Addr() net.Addr { return &net.UnixAddr{Name: "tunnel", Net: "unix"} }

// serveConnect serves the CONNECT proxy on a unix socket (the API server's egress selector's
// "cluster" connection, proxyProtocol HTTPConnect) or a TCP address (HTTPS_PROXY).
func serveConnect(network, address string, proxy http.Handler) error {
	if network == "unix" {
		_ = os.Remove(address)
	}
	listener, err := net.Listen(network, address)
	if err != nil {
		return err
	}
	return http.Serve(listener, proxy)
}

// connectProxy is the network between the control plane and the nodes: a tunnel to a routed
// address (a Service's virtual IP; a real kubelet's port, "unix:<its node's door socket>") goes
// where its file says, one to any other node's kubelet port ends at this endpoint, one to loopback (the
// lab's own servers) is dialled as asked, and anything else is refused: the world's addresses
// must never reach the host's real network.
func connectProxy(kubeletPort, routesDir string, tunnels *tunnelListener) http.Handler {
	forward := forwardProxy(routesDir)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			forward.ServeHTTP(w, r)
			return
		}
		host, port, err := net.SplitHostPort(r.Host)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var upstream net.Conn
		target, known := route(routesDir, host, port)
		if known || port != kubeletPort {
			if !known {
				http.Error(w, "no route to "+r.Host+" in the lab's network", http.StatusBadGateway)
				return
			}
			network := "tcp"
			if socket, isUnix := strings.CutPrefix(target, "unix:"); isUnix {
				network, target = "unix", socket
			}
			if upstream, err = net.DialTimeout(network, target, 10*time.Second); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
		}
		conn, buffered, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
			conn.Close()
			return
		}
		tunnel := &bufferedConn{Conn: conn, reader: buffered.Reader}
		log.Printf("CONNECT %s", r.Host)
		if upstream == nil {
			tunnels.conns <- tunnel
			return
		}
		go func() { _, _ = io.Copy(upstream, tunnel); upstream.Close() }()
		_, _ = io.Copy(tunnel, upstream)
		tunnel.Close()
	})
}

// forwardProxy serves plain-HTTP proxy requests ("GET http://<pod IP>:<port>/metrics", what a
// program with an http proxy_url sends, Prometheus scraping a pod) to the routed address (a
// played program's, or a real kubelet's pod's door), as the pod network carries a scrape to the
// pod; nothing else reaches past it.
func forwardProxy(routesDir string) http.Handler {
	dial := func(ctx context.Context, _, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err != nil {
			return nil, err
		}
		target, known := route(routesDir, host, port)
		if !known {
			return nil, fmt.Errorf("no route to %s in the lab's network", address)
		}
		network := "tcp"
		if socket, isUnix := strings.CutPrefix(target, "unix:"); isUnix {
			network, target = "unix", socket
		}
		return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, target)
	}
	// a pod's address may be another pod's later: no connection outlives a few idle seconds
	transport := &http.Transport{DialContext: dial, IdleConnTimeout: 5 * time.Second}
	proxy := &httputil.ReverseProxy{Rewrite: func(*httputil.ProxyRequest) {}, Transport: transport}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !r.URL.IsAbs() || r.URL.Scheme != "http" {
			http.Error(w, "only CONNECT and absolute http:// requests are served here", http.StatusMethodNotAllowed)
			return
		}
		if _, known := route(routesDir, r.URL.Hostname(), r.URL.Port()); !known {
			http.Error(w, "no route to "+r.URL.Host+" in the lab's network", http.StatusBadGateway)
			return
		}
		proxy.ServeHTTP(w, r)
	})
}

// route is where a tunnel to host:port goes: the address its routes file holds, else itself
// when it is a loopback address; known is false for any other address.
func route(routesDir, host, port string) (target string, known bool) {
	if routesDir != "" {
		if routed, err := os.ReadFile(filepath.Join(routesDir, host+"_"+port)); err == nil {
			return strings.TrimSpace(string(routed)), true
		}
	}
	ip := net.ParseIP(host)
	return net.JoinHostPort(host, port), host == "localhost" || (ip != nil && ip.IsLoopback())
}

// bufferedConn keeps what the CONNECT request's reader already read past the headers.
type bufferedConn struct {
	net.Conn
	reader *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.reader.Read(b) }

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, method := range []string{"GET", "POST"} {
		for _, tail := range []string{"{container}", "{uid}/{container}"} {
			mux.HandleFunc(method+" /exec/{namespace}/{pod}/"+tail, s.exec)
			mux.HandleFunc(method+" /attach/{namespace}/{pod}/"+tail, s.attach)
		}
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}", s.portForward)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}/{uid}", s.portForward)
	}
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.containerLogs)
	mux.HandleFunc("GET /metrics/resource", s.resourceMetrics)
	authenticated := requireClientCert(mux)
	outer := http.NewServeMux()
	outer.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	outer.Handle("/", authenticated)
	return outer
}

// requireClientCert answers 401, as a kubelet without anonymous auth does, when the TLS
// handshake carried no verified client certificate.
func requireClientCert(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// --- exec and attach -------------------------------------------------------------------------

// container is one request's target: the streaming code names only the pod, so the namespace
// rides along here.
type container struct {
	*server
	namespace string
}

func (s *server) exec(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommandserver.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommandserver.ServeExec(w, r, container{s, r.PathValue("namespace")}, r.PathValue("pod"),
		types.UID(r.PathValue("uid")), r.PathValue("container"), r.URL.Query()["command"], opts,
		streamIdleTimeout, streamCreationTimeout, remotecommandconsts.SupportedStreamingProtocols)
}

func (s *server) attach(w http.ResponseWriter, r *http.Request) {
	opts, err := remotecommandserver.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommandserver.ServeAttach(w, r, container{s, r.PathValue("namespace")}, r.PathValue("pod"),
		types.UID(r.PathValue("uid")), r.PathValue("container"), opts,
		streamIdleTimeout, streamCreationTimeout, remotecommandconsts.SupportedStreamingProtocols)
}

// ExecInContainer implements remotecommand.Executor.
func (c container) ExecInContainer(ctx context.Context, pod string, _ types.UID, name string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	args := append(c.target("exec", pod, name, tty), "--")
	return c.run(ctx, append(args, cmd...), in, out, errOut, resize)
}

// AttachContainer implements remotecommand.Attacher.
func (c container) AttachContainer(ctx context.Context, pod string, _ types.UID, name string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	return c.run(ctx, c.target("attach", pod, name, tty), in, out, errOut, resize)
}

func (c container) target(verb, pod, name string, tty bool) []string {
	args := []string{verb, c.namespace, pod, name}
	if tty {
		args = append(args, "--tty")
	}
	return args
}

// run starts the exec command and wires the streams to it. An exit code comes back as the
// kubelet's CodeExitError, which ServeExec turns into the status kubectl exits with.
func (c container) run(ctx context.Context, args []string, in io.Reader, out, errOut io.WriteCloser,
	resize <-chan remotecommand.TerminalSize) error {
	if resize != nil {
		go func() {
			for range resize { // no terminal to resize
			}
		}()
	}
	command := exec.CommandContext(ctx, c.execCommand[0], append(c.execCommand[1:], args...)...)
	// The children die with the endpoint, as the endpoint dies with the lab.
	command.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out != nil {
		command.Stdout = out
	}
	if errOut != nil {
		command.Stderr = errOut
	} else if out != nil { // a TTY has one output stream
		command.Stderr = out
	}
	// A pipe, not command.Stdin: Wait would otherwise wait for the client to close stdin even
	// after the program has exited.
	var stdin io.WriteCloser
	if in != nil {
		var err error
		if stdin, err = command.StdinPipe(); err != nil {
			return err
		}
	}
	if err := command.Start(); err != nil {
		return err
	}
	if stdin != nil {
		go func() {
			io.Copy(stdin, in)
			stdin.Close()
		}()
	}
	err := command.Wait()
	var exited *exec.ExitError
	if errors.As(err, &exited) && exited.ExitCode() >= 0 {
		return utilexec.CodeExitError{Err: err, Code: exited.ExitCode()}
	}
	return err
}

// --- port-forward ----------------------------------------------------------------------------

func (s *server) portForward(w http.ResponseWriter, r *http.Request) {
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, container{s, r.PathValue("namespace")}, r.PathValue("pod"),
		types.UID(r.PathValue("uid")), opts, streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// PortForward implements portforward.PortForwarder: dial what the ports file names and pipe.
// A port with no file is one the pod does not listen on; the error reads like containerd's.
func (c container) PortForward(ctx context.Context, pod string, _ types.UID, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	file := filepath.Join(c.portsDir, c.namespace+"_"+pod, strconv.Itoa(int(port)))
	address, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside namespace of pod %s/%s: connection refused (nothing listens: %v)", port, c.namespace, pod, err)
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", strings.TrimSpace(string(address)))
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside namespace of pod %s/%s: %v", port, c.namespace, pod, err)
	}
	defer conn.Close()
	go func() {
		io.Copy(conn, stream)
		if tcp, ok := conn.(*net.TCPConn); ok {
			tcp.CloseWrite() // the client is done sending; the server may still answer
		}
	}()
	_, err = io.Copy(stream, conn)
	return err
}

// --- containerLogs ---------------------------------------------------------------------------

// logOptions is the part of v1.PodLogOptions the kubelet's log reader honours.
type logOptions struct {
	follow, previous, timestamps bool
	tailLines, limitBytes        int64 // -1: not set
	since                        time.Time
}

func parseLogOptions(query map[string][]string) (logOptions, error) {
	opts := logOptions{tailLines: -1, limitBytes: -1}
	get := func(name string) string {
		if values := query[name]; len(values) > 0 {
			return values[0]
		}
		return ""
	}
	var err error
	flags := map[string]*bool{"follow": &opts.follow, "previous": &opts.previous, "timestamps": &opts.timestamps}
	for name, target := range flags {
		if v := get(name); v != "" {
			if *target, err = strconv.ParseBool(v); err != nil {
				return opts, err
			}
		}
	}
	numbers := map[string]*int64{"tailLines": &opts.tailLines, "limitBytes": &opts.limitBytes}
	for name, target := range numbers {
		if v := get(name); v != "" {
			if *target, err = strconv.ParseInt(v, 10, 64); err != nil {
				return opts, err
			}
		}
	}
	if v := get("sinceSeconds"); v != "" {
		seconds, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return opts, err
		}
		opts.since = time.Now().Add(-time.Duration(seconds) * time.Second)
	}
	if v := get("sinceTime"); v != "" {
		if opts.since, err = time.Parse(time.RFC3339, v); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// containerLogs answers as the kubelet's getContainerLogs and the CRI log reader do, with the
// same words for the same failures (a 400 carries its text through the API server to kubectl).
func (s *server) containerLogs(w http.ResponseWriter, r *http.Request) {
	pod, name := r.PathValue("pod"), r.PathValue("container")
	opts, err := parseLogOptions(r.URL.Query())
	if err != nil {
		http.Error(w, `{"message": "Unable to decode query."}`, http.StatusBadRequest)
		return
	}
	path := filepath.Join(s.logsDir, r.PathValue("namespace")+"_"+pod, name+".log")
	if opts.previous {
		// The last ended run's log, which the rehearsal keeps beside the current one.
		path = strings.TrimSuffix(path, ".log") + ".previous.log"
		if _, err := os.Stat(path); err != nil {
			http.Error(w, fmt.Sprintf("previous terminated container %q in pod %q not found", name, pod), http.StatusBadRequest)
			return
		}
	}
	if _, err := filepath.EvalSymlinks(path); err != nil {
		http.Error(w, fmt.Sprintf("failed to try resolving symlinks in path %q: %v", path, err), http.StatusBadRequest)
		return
	}
	file, err := os.Open(path)
	if err != nil {
		http.Error(w, fmt.Sprintf("failed to open log file %q: %v", path, err), http.StatusBadRequest)
		return
	}
	defer file.Close()
	if opts.tailLines >= 0 {
		if err := seekTail(file, opts.tailLines); err != nil {
			http.Error(w, fmt.Sprintf("failed to tail %d lines of log file %q: %v", opts.tailLines, path, err), http.StatusBadRequest)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	copyLog(r.Context(), w, file, path, opts)
}

// seekTail moves to the start of the last n lines (n = 0: the end, for follow to go on from).
func seekTail(file *os.File, n int64) error {
	data, err := io.ReadAll(file)
	if err != nil {
		return err
	}
	start := len(data)
	if n > 0 {
		body := bytes.TrimSuffix(data, []byte("\n")) // the last newline starts no line
		start = 0
		for i := len(body) - 1; i >= 0; i-- {
			if body[i] == '\n' {
				if n--; n == 0 {
					start = i + 1
					break
				}
			}
		}
	}
	_, err = file.Seek(int64(start), io.SeekStart)
	return err
}

// copyLog writes each complete record from file; with follow it waits for more until the
// client goes away or the file is removed (the container is gone).
func copyLog(ctx context.Context, w http.ResponseWriter, file *os.File, path string, opts logOptions) {
	reader := bufio.NewReader(file)
	flush := http.NewResponseController(w).Flush
	remaining := opts.limitBytes
	pending := ""
	for {
		chunk, err := reader.ReadString('\n')
		pending += chunk
		if err == nil {
			text := render(strings.TrimSuffix(pending, "\n"), opts)
			pending = ""
			if text == "" {
				continue
			}
			if remaining >= 0 && int64(len(text)) >= remaining {
				io.WriteString(w, text[:remaining])
				return
			}
			remaining -= int64(len(text))
			if _, err := io.WriteString(w, text); err != nil {
				return
			}
			flush()
			continue
		}
		if err != io.EOF || !opts.follow {
			return
		}
		flush()
		select {
		case <-ctx.Done():
			return
		case <-time.After(followPoll):
		}
		if _, err := os.Stat(path); err != nil {
			return
		}
	}
}

// render turns one CRI log record into what kubectl shows: its text, a newline unless the
// record is partial (P), and the timestamp first when asked; "" for one before since or garbled.
func render(record string, opts logOptions) string {
	fields := strings.SplitN(record, " ", 4)
	if len(fields) < 3 {
		return ""
	}
	stamp, err := time.Parse(time.RFC3339Nano, fields[0])
	if err != nil || (!opts.since.IsZero() && stamp.Before(opts.since)) {
		return ""
	}
	text := ""
	if len(fields) == 4 {
		text = fields[3]
	}
	if fields[2] != "P" {
		text += "\n"
	}
	if opts.timestamps {
		text = stamp.Format(time.RFC3339Nano) + " " + text
	}
	return text
}

// --- resource metrics ------------------------------------------------------------------------

// resourceMetrics serves the file the world keeps for the node the request was addressed to
// (its InternalIP, through a CONNECT tunnel), as the kubelet serves its resource metrics.
func (s *server) resourceMetrics(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	if s.metricsDir == "" || strings.ContainsAny(host, "/\\") {
		http.NotFound(w, r)
		return
	}
	text, err := os.ReadFile(filepath.Join(s.metricsDir, host+".prom"))
	if err != nil {
		http.Error(w, fmt.Sprintf("no resource metrics for the node at %s: %v", host, err), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(text)
}

// --- request log -----------------------------------------------------------------------------

// recorder remembers the status for the request log; it passes flushing and hijacking (the
// streaming protocols take the connection over) through to the real writer.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if r.status == 0 {
		r.status = http.StatusSwitchingProtocols
	}
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// logged writes one line per request to stderr once it is done.
func logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started := time.Now()
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		user := "-"
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			user = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		log.Printf("%s %s %s %d %s user=%s", r.RemoteAddr, r.Method, r.URL.RequestURI(), rec.status,
			time.Since(started).Round(time.Millisecond), user)
	})
}
