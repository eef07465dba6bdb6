// Command xds-server is an xDS management server for tollgate's tests: state of the world over
// ADS, serving ratelimit.config.ratelimit.v3.RateLimitConfig resources from a snapshot cache.
//
// It is driven by JSON lines on standard input and reports what happens as JSON lines on
// standard output; standard error carries only logs. Commands, one JSON object a line:
//
//	{"op":"set","node":"NODE","version":"V","configs":[RateLimitConfig in protojson form, ...]}
//	{"op":"clear","node":"NODE"}
//
// Each command gets exactly one reply event, in the order the commands came: "set", "cleared"
// or "error". The other events ("listening", "stream-metadata", "stream-open", "request",
// "response", "stream-closed") come from the server itself. End of input, SIGTERM or SIGINT
// stops the server, which then exits 0.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	ratelimit "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxMessageSize bounds the messages the server takes and sends, well above any test's configs.
const maxMessageSize = 16 << 20

// events writes one JSON object a line to standard output. Callbacks run on the streams'
// goroutines, so whole lines are written under a lock; os.Stdout is unbuffered, so every line
// is out as soon as it is written.
type events struct {
	mu  sync.Mutex
	out io.Writer
}

func (e *events) emit(event any) {
	line, err := json.Marshal(event)
	if err != nil {
		fmt.Fprintf(os.Stderr, "xds-server: cannot encode an event: %v\n", err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.out.Write(append(line, '\n'))
}

type listeningEvent struct {
	Event string `json:"event"`
	Port  int    `json:"port"`
}

type setEvent struct {
	Event   string `json:"event"`
	Node    string `json:"node"`
	Version string `json:"version"`
}

type clearedEvent struct {
	Event string `json:"event"`
	Node  string `json:"node"`
}

type errorEvent struct {
	Event   string `json:"event"`
	Op      string `json:"op"`
	Node    string `json:"node,omitempty"`
	Version string `json:"version,omitempty"`
	Message string `json:"message"`
}

type streamMetadataEvent struct {
	Event    string              `json:"event"`
	Method   string              `json:"method"`
	Metadata map[string][]string `json:"metadata"`
	// Over TLS, the connection's version and the client certificate the server verified.
	TLS *tlsPeer `json:"tls,omitempty"`
}

type tlsPeer struct {
	Version string `json:"version"`
	// The client certificate's serial number in upper-case hex, as node:crypto reports it; "" when
	// the client sent none.
	ClientSerial string `json:"clientSerial"`
}

// peerTLS is what the stream's connection negotiated, or nil without TLS.
func peerTLS(ctx context.Context) *tlsPeer {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	out := &tlsPeer{Version: tls.VersionName(info.State.Version)}
	if len(info.State.PeerCertificates) > 0 {
		out.ClientSerial = fmt.Sprintf("%X", info.State.PeerCertificates[0].SerialNumber)
	}
	return out
}

type streamOpenEvent struct {
	Event    string              `json:"event"`
	Stream   int64               `json:"stream"`
	TypeURL  string              `json:"typeUrl"`
	Metadata map[string][]string `json:"metadata"`
}

type streamClosedEvent struct {
	Event  string `json:"event"`
	Stream int64  `json:"stream"`
	Node   string `json:"node"`
}

type errorDetail struct {
	Code    int32  `json:"code"`
	Message string `json:"message"`
}

type requestEvent struct {
	Event         string          `json:"event"`
	Stream        int64           `json:"stream"`
	Kind          string          `json:"kind"`
	Node          string          `json:"node"`
	NodeMetadata  json.RawMessage `json:"nodeMetadata"`
	TypeURL       string          `json:"typeUrl"`
	VersionInfo   string          `json:"versionInfo"`
	ResponseNonce string          `json:"responseNonce"`
	ResourceNames []string        `json:"resourceNames"`
	ErrorDetail   *errorDetail    `json:"errorDetail"`
}

type responseEvent struct {
	Event     string `json:"event"`
	Stream    int64  `json:"stream"`
	TypeURL   string `json:"typeUrl"`
	Version   string `json:"version"`
	Nonce     string `json:"nonce"`
	Resources int    `json:"resources"`
}

// command is one line of standard input.
type command struct {
	Op      string            `json:"op"`
	Node    string            `json:"node"`
	Version string            `json:"version"`
	Configs []json.RawMessage `json:"configs"`
}

// incomingMetadata is the gRPC metadata a stream came with, never nil (it encodes as {}).
func incomingMetadata(ctx context.Context) map[string][]string {
	md, _ := metadata.FromIncomingContext(ctx)
	out := make(map[string][]string, len(md))
	for key, values := range md {
		out[key] = append([]string{}, values...)
	}
	return out
}

// nodeMetadata is the node's metadata as JSON, or null when it has none.
func nodeMetadata(node *core.Node) json.RawMessage {
	if node.GetMetadata() == nil {
		return json.RawMessage("null")
	}
	encoded, err := protojson.Marshal(node.GetMetadata())
	if err != nil {
		return json.RawMessage("null")
	}
	return encoded
}

func requestKind(req *discovery.DiscoveryRequest) string {
	switch {
	case req.GetErrorDetail() != nil:
		return "nack"
	case req.GetResponseNonce() == "":
		return "initial"
	default:
		return "ack"
	}
}

func callbacks(out *events) server.Callbacks {
	return server.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, typeURL string) error {
			out.emit(streamOpenEvent{"stream-open", id, typeURL, incomingMetadata(ctx)})
			return nil
		},
		StreamClosedFunc: func(id int64, node *core.Node) {
			out.emit(streamClosedEvent{"stream-closed", id, node.GetId()})
		},
		StreamRequestFunc: func(id int64, req *discovery.DiscoveryRequest) error {
			var detail *errorDetail
			if status := req.GetErrorDetail(); status != nil {
				detail = &errorDetail{status.GetCode(), status.GetMessage()}
			}
			names := append([]string{}, req.GetResourceNames()...)
			out.emit(requestEvent{
				Event:         "request",
				Stream:        id,
				Kind:          requestKind(req),
				Node:          req.GetNode().GetId(),
				NodeMetadata:  nodeMetadata(req.GetNode()),
				TypeURL:       req.GetTypeUrl(),
				VersionInfo:   req.GetVersionInfo(),
				ResponseNonce: req.GetResponseNonce(),
				ResourceNames: names,
				ErrorDetail:   detail,
			})
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
			out.emit(responseEvent{
				Event:     "response",
				Stream:    id,
				TypeURL:   resp.GetTypeUrl(),
				Version:   resp.GetVersionInfo(),
				Nonce:     resp.GetNonce(),
				Resources: len(resp.GetResources()),
			})
		},
	}
}

// decodeConfigs reads RateLimitConfigs in protojson form, refusing unknown fields and two
// configs of one name (the snapshot keys resources by name and would keep only one).
func decodeConfigs(raw []json.RawMessage) ([]types.Resource, error) {
	strict := protojson.UnmarshalOptions{DiscardUnknown: false}
	seen := make(map[string]int, len(raw))
	resources := make([]types.Resource, 0, len(raw))
	for i, text := range raw {
		config := &ratelimit.RateLimitConfig{}
		if err := strict.Unmarshal(text, config); err != nil {
			return nil, fmt.Errorf("configs[%d]: %w", i, err)
		}
		if first, ok := seen[config.GetName()]; ok {
			return nil, fmt.Errorf("configs[%d]: name %q is already used by configs[%d]", i, config.GetName(), first)
		}
		seen[config.GetName()] = i
		resources = append(resources, config)
	}
	return resources, nil
}

func set(snapshots cache.SnapshotCache, cmd command) error {
	if cmd.Node == "" {
		return errors.New("set needs a node")
	}
	resources, err := decodeConfigs(cmd.Configs)
	if err != nil {
		return err
	}
	snapshot, err := cache.NewSnapshot(cmd.Version, map[resource.Type][]types.Resource{
		resource.RateLimitConfigType: resources,
	})
	if err != nil {
		return err
	}
	// Snapshot.Consistent checks references between listeners, routes, clusters and endpoints
	// only; a snapshot of rate-limit configs has nothing for it to check.
	return snapshots.SetSnapshot(context.Background(), cmd.Node, snapshot)
}

// handle carries out one line of input and writes its one reply event.
func handle(snapshots cache.SnapshotCache, out *events, line []byte) {
	var cmd command
	if err := json.Unmarshal(line, &cmd); err != nil {
		out.emit(errorEvent{Event: "error", Message: "not a JSON command: " + err.Error()})
		return
	}
	switch cmd.Op {
	case "set":
		if err := set(snapshots, cmd); err != nil {
			out.emit(errorEvent{"error", "set", cmd.Node, cmd.Version, err.Error()})
			return
		}
		out.emit(setEvent{"set", cmd.Node, cmd.Version})
	case "clear":
		if cmd.Node == "" {
			out.emit(errorEvent{Event: "error", Op: "clear", Message: "clear needs a node"})
			return
		}
		snapshots.ClearSnapshot(cmd.Node)
		out.emit(clearedEvent{"cleared", cmd.Node})
	default:
		out.emit(errorEvent{Event: "error", Op: cmd.Op, Node: cmd.Node, Message: fmt.Sprintf("unknown op %q", cmd.Op)})
	}
}

// readCommands handles standard input line by line until its end.
func readCommands(snapshots cache.SnapshotCache, out *events, done chan<- struct{}) {
	defer close(done)
	reader := bufio.NewReaderSize(os.Stdin, 1<<16)
	for {
		line, err := reader.ReadBytes('\n')
		if len(line) > 0 {
			if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
				handle(snapshots, out, trimmed)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "xds-server: reading standard input: %v\n", err)
			}
			return
		}
	}
}

// serverCredentials is TLS from the certificate and key, from TLS minVersion on, requiring client
// certificates signed by clientCA when one is given.
func serverCredentials(certPath, keyPath, clientCA string, minVersion uint16) (credentials.TransportCredentials, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("loading -tls-cert and -tls-key: %w", err)
	}
	config := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: minVersion}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("reading -client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-client-ca %s holds no PEM certificate", clientCA)
		}
		config.ClientCAs = pool
		config.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(config), nil
}

func logger(debug bool) log.Logger {
	print := func(level string) func(string, ...any) {
		return func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "xds-server: "+level+": "+format+"\n", args...)
		}
	}
	quiet := func(string, ...any) {}
	funcs := log.LoggerFuncs{DebugFunc: quiet, InfoFunc: quiet, WarnFunc: print("warn"), ErrorFunc: print("error")}
	if debug {
		funcs.DebugFunc = print("debug")
		funcs.InfoFunc = print("info")
	}
	return funcs
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "xds-server: "+format+"\n", args...)
	os.Exit(code)
}

func main() {
	port := flag.Int("port", 0, "port to listen on, on 127.0.0.1 (required)")
	certPath := flag.String("tls-cert", "", "serve TLS with this PEM certificate (with -tls-key)")
	keyPath := flag.String("tls-key", "", "serve TLS with this PEM key (with -tls-cert)")
	clientCA := flag.String("client-ca", "", "with TLS, require client certificates signed by this PEM CA")
	tlsMin := flag.String("tls-min", "1.2", "with TLS, the lowest version accepted: 1.2 or 1.3")
	debug := flag.Bool("debug", false, "log the cache's and server's debug messages to standard error")
	flag.Parse()

	if *port <= 0 || *port > 65535 {
		fail(2, "-port N is required (1 to 65535)")
	}
	if (*certPath == "") != (*keyPath == "") {
		fail(2, "-tls-cert and -tls-key go together")
	}
	if *clientCA != "" && *certPath == "" {
		fail(2, "-client-ca needs -tls-cert and -tls-key")
	}
	minVersion, ok := map[string]uint16{"1.2": tls.VersionTLS12, "1.3": tls.VersionTLS13}[*tlsMin]
	if !ok {
		fail(2, "-tls-min must be 1.2 or 1.3")
	}

	out := &events{out: os.Stdout}
	options := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessageSize),
		grpc.MaxSendMsgSize(maxMessageSize),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			out.emit(streamMetadataEvent{"stream-metadata", info.FullMethod, incomingMetadata(ss.Context()), peerTLS(ss.Context())})
			return handler(srv, ss)
		}),
	}
	if *certPath != "" {
		creds, err := serverCredentials(*certPath, *keyPath, *clientCA, minVersion)
		if err != nil {
			fail(2, "%v", err)
		}
		options = append(options, grpc.Creds(creds))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snapshots := cache.NewSnapshotCache(true, cache.IDHash{}, logger(*debug))
	xds := server.NewServer(ctx, snapshots, callbacks(out))
	grpcServer := grpc.NewServer(options...)
	discovery.RegisterAggregatedDiscoveryServiceServer(grpcServer, xds)

	listener, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(*port)))
	if err != nil {
		fail(1, "%v", err)
	}
	served := make(chan error, 1)
	go func() { served <- grpcServer.Serve(listener) }()
	out.emit(listeningEvent{"listening", *port})

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	inputDone := make(chan struct{})
	go readCommands(snapshots, out, inputDone)

	select {
	case <-signals:
	case <-inputDone:
	case err := <-served:
		fail(1, "serving: %v", err)
	}

	// Ending the server's context ends the open streams; GracefulStop then has nothing to wait
	// for, unless a handler is stuck, when Stop cuts it off.
	cancel()
	stopped := make(chan struct{})
	go func() {
		grpcServer.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		grpcServer.Stop()
	}
	os.Exit(0)
}
