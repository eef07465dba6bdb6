package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// connectTimeout is how long the run waits for the server before it gives up on it.
const connectTimeout = 5 * time.Second

// runState is what every client of a run shares: the settings, read only, and the counters.
type runState struct {
	start             time.Time
	duration          time.Duration
	origin, windowMs  int64
	reportingInterval time.Duration
	domain            string
	semantics         string
	settings          *bucketSettings
	listUnchanged     bool
	assignmentLimit   int
	counters          *reportCounters

	ignoredRequestsPerTimeUnit atomic.Int64
	unknownBucketActions       atomic.Int64
}

// windowIndex is the window that holds now, counted from the run's first.
func (r *runState) windowIndex(now time.Time) int {
	return int(max(now.UnixMilli()-r.origin, 0) / r.windowMs)
}

// run plays the scenario's clients against the server, all at once, and sums up what they saw.
// It fails only when the server cannot be reached at all.
func run(ctx context.Context, sc *Scenario) (*Result, error) {
	plans, err := sc.expand()
	if err != nil {
		return nil, err
	}
	if err := waitForServer(ctx, sc.Addr, connectTimeout); err != nil {
		return nil, err
	}
	clients := make([]*simClient, 0, len(plans))
	r := &runState{
		duration:          time.Duration(sc.DurationMs) * time.Millisecond,
		windowMs:          sc.WindowMs,
		reportingInterval: time.Duration(sc.ReportingIntervalMs) * time.Millisecond,
		domain:            sc.Domain,
		semantics:         sc.semanticsName(),
		settings:          newBucketSettings(sc),
		listUnchanged:     sc.ListUnchanged,
		assignmentLimit:   sc.assignmentLimit(),
		counters:          &reportCounters{},
	}
	for _, plan := range plans {
		// A connection of its own for each client, as each Envoy has.
		conn, err := grpc.NewClient(sc.Addr, dialOptions()...)
		if err != nil {
			for _, c := range clients {
				_ = c.conn.Close()
			}
			return nil, fmt.Errorf("cannot connect to %s: %w", sc.Addr, err)
		}
		clients = append(clients, newSimClient(plan, r, conn, sc.Seed))
	}
	r.start = time.Now()
	r.origin = r.start.UnixMilli() / r.windowMs * r.windowMs
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { c.loop(ctx) })
	}
	wg.Wait()
	return buildResult(r, clients, sc.perClient()), nil
}

// dialOptions: plaintext, and reconnects within a second of the server's return, where gRPC's
// default backoff would wait up to two minutes.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second,
			},
			MinConnectTimeout: 10 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
	}
}

// waitForServer fails when no connection to addr is ready within the timeout.
func waitForServer(ctx context.Context, addr string, timeout time.Duration) error {
	conn, err := grpc.NewClient(addr, dialOptions()...)
	if err != nil {
		return fmt.Errorf("cannot connect to %s: %w", addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn.Connect()
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return nil
		}
		if !conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("cannot connect to %s: no connection in %s (%s)", addr, timeout, state)
		}
	}
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}
