package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// fakeServer is an RLQS server for the tests: it records every message it receives and answers
// each with whatever respond returns (nothing for nil).
type fakeServer struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	addr    string
	srv     *grpc.Server
	options []grpc.ServerOption
	respond func(m received) *rlqspb.RateLimitQuotaResponse

	mu sync.Mutex
	// respond runs under mu, so its closure may keep state without a lock of its own.
	streams      int
	closedByPeer int
	messages     []received
}

// received is one RateLimitQuotaUsageReports as the server saw it.
type received struct {
	at     time.Time
	stream int
	seq    int
	domain string
	usages []usage
}

type usage struct {
	bucket          map[string]string
	allowed, denied uint64
	elapsed         time.Duration
}

// first tells whether this usage is a new bucket's immediate report: its first request only.
func (u usage) first() bool { return u.allowed+u.denied == 1 && u.elapsed == 0 }

func startFake(t *testing.T, respond func(received) *rlqspb.RateLimitQuotaResponse, options ...grpc.ServerOption) *fakeServer {
	t.Helper()
	return listenFake(t, "127.0.0.1:0", respond, options)
}

func listenFake(t *testing.T, addr string, respond func(received) *rlqspb.RateLimitQuotaResponse, options []grpc.ServerOption) *fakeServer {
	t.Helper()
	var lis net.Listener
	var err error
	for range 50 {
		if lis, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	f := &fakeServer{addr: lis.Addr().String(), srv: grpc.NewServer(options...), options: options, respond: respond}
	rlqspb.RegisterRateLimitQuotaServiceServer(f.srv, f)
	go func() { _ = f.srv.Serve(lis) }()
	t.Cleanup(f.srv.Stop)
	return f
}

// restart is a new server on the same address, answering alike, that starts with no record.
func (f *fakeServer) restart(t *testing.T) *fakeServer {
	t.Helper()
	return listenFake(t, f.addr, f.respond, f.options)
}

func (f *fakeServer) StreamRateLimitQuotas(call rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	f.mu.Lock()
	f.streams++
	stream := f.streams
	f.mu.Unlock()
	for seq := 0; ; seq++ {
		reports, err := call.Recv()
		if errors.Is(err, io.EOF) {
			f.mu.Lock()
			f.closedByPeer++
			f.mu.Unlock()
			return nil
		}
		if err != nil {
			return err
		}
		m := received{at: time.Now(), stream: stream, seq: seq, domain: reports.GetDomain()}
		for _, u := range reports.GetBucketQuotaUsages() {
			m.usages = append(m.usages, usage{
				bucket: u.GetBucketId().GetBucket(), allowed: u.GetNumRequestsAllowed(),
				denied: u.GetNumRequestsDenied(), elapsed: u.GetTimeElapsed().AsDuration(),
			})
		}
		f.mu.Lock()
		f.messages = append(f.messages, m)
		var response *rlqspb.RateLimitQuotaResponse
		if f.respond != nil {
			response = f.respond(m)
		}
		f.mu.Unlock()
		if response != nil {
			if err := call.Send(response); err != nil {
				return err
			}
		}
	}
}

func (f *fakeServer) received() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]received(nil), f.messages...)
}

func (f *fakeServer) closed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closedByPeer
}

// Bucket actions, for the fake's answers.

func respondWith(actions ...*rlqspb.RateLimitQuotaResponse_BucketAction) *rlqspb.RateLimitQuotaResponse {
	return &rlqspb.RateLimitQuotaResponse{BucketAction: actions}
}

func assign(bucket map[string]string, s *typev3.RateLimitStrategy, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqspb.BucketId{Bucket: bucket},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    s,
			},
		},
	}
}

func abandon(bucket map[string]string) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqspb.BucketId{Bucket: bucket},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

func blanket(rule typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
}

var (
	allowAllRule = blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	denyAllRule  = blanket(typev3.RateLimitStrategy_DENY_ALL)
)

func tokenBucketRule(maxTokens, perFill uint32, fill time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
		TokenBucket: &typev3.TokenBucket{
			MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill),
		},
	}}
}

func requestsPerTimeUnitRule() *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{
			RequestsPerTimeUnit: 10, TimeUnit: typev3.RateLimitUnit_SECOND,
		},
	}}
}

// simulate runs a scenario in this process against the fake.
func simulate(t *testing.T, sc Scenario) *Result {
	t.Helper()
	if err := sc.validate(); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	result, err := run(context.Background(), &sc)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return result
}
