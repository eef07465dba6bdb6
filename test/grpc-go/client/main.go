// A grpc-go client for the tests: it makes one health check on -addr, closes its connection as
// grpc-go's ClientConn.Close does, and then, with -sigterm, sends SIGTERM to that process at
// once. A client closing while the server drains is the race the exit-time test covers: Node's
// HTTP/2 session then fails and never reports its close (src/grpc/drain.ts).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	addr := flag.String("addr", "", "host:port of the gRPC server")
	sigterm := flag.Int("sigterm", 0, "a process to send SIGTERM to once the connection is closed")
	flag.Parse()
	if *addr == "" {
		fmt.Fprintln(os.Stderr, "grpc-go client: -addr is needed")
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "grpc-go client: %v\n", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	conn.Close()
	if *sigterm > 0 {
		_ = syscall.Kill(*sigterm, syscall.SIGTERM)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "grpc-go client: health check: %v\n", err)
		os.Exit(1)
	}
}
