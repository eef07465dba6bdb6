package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
)

// outboxSize is how many reports may wait for a stream that is slow to take them; past it,
// reports are dropped and counted.
const outboxSize = 1024

// stream is one StreamRateLimitQuotas call. The client's loop owns it: it puts reports in out and
// closes out when it is done with the stream. Its goroutines send (one sender, as gRPC requires),
// receive, and tell the loop what happens through events.
type stream struct {
	out    chan *rlqspb.RateLimitQuotaUsageReports
	cancel context.CancelFunc

	mu sync.Mutex
	// When each report not yet followed by a response was sent.
	pending []time.Time
}

// event is what a stream tells its client's loop: it opened, a response came, or it ended.
type event struct {
	stream    *stream
	opened    bool
	response  *rlqspb.RateLimitQuotaResponse
	latencies []time.Duration
	// ended is set with err: the call's error, nil or io.EOF when the server ended it with OK.
	ended  bool
	err    error
	during string
	at     time.Time
}

// reportCounters counts the reports of the whole run; streams' goroutines add to them.
type reportCounters struct {
	sent, dropped                     atomic.Int64
	immediate, periodic, onAssignment atomic.Int64
}

// streamEnv is what a stream needs from its client.
type streamEnv struct {
	conn     *grpc.ClientConn
	domain   string
	every    bool
	counters *reportCounters
	events   chan<- event
	// Closed when the client's loop is gone: nobody reads events any more.
	done <-chan struct{}
}

// openStream starts a call and returns at once; reports put in out wait for the call to open.
// Opening waits while the connection is being made, and fails at once when the last attempt to
// make it failed (gRPC's fail-fast); the loop goes on meanwhile.
func openStream(ctx context.Context, env streamEnv) *stream {
	ctx, cancel := context.WithCancel(ctx)
	s := &stream{out: make(chan *rlqspb.RateLimitQuotaUsageReports, outboxSize), cancel: cancel}
	go s.run(ctx, env)
	return s
}

func (s *stream) run(ctx context.Context, env streamEnv) {
	call, err := rlqspb.NewRateLimitQuotaServiceClient(env.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		s.deliver(env, event{ended: true, err: err, during: "open", at: time.Now()})
		// The reports queued for it are lost, as Envoy loses those of a stream that failed.
		for range s.out {
			env.counters.dropped.Add(1)
		}
		return
	}
	s.deliver(env, event{opened: true, at: time.Now()})
	go s.send(call, env)
	s.receive(call, env)
}

func (s *stream) send(call rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, env streamEnv) {
	first := true
	for reports := range s.out {
		if first || env.every {
			reports.Domain = env.domain
		}
		first = false
		s.mu.Lock()
		s.pending = append(s.pending, time.Now())
		s.mu.Unlock()
		if err := call.Send(reports); err != nil {
			// The stream is broken; receive reports why.
			env.counters.dropped.Add(1)
			continue
		}
		env.counters.sent.Add(1)
	}
	_ = call.CloseSend()
}

func (s *stream) receive(call rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient, env streamEnv) {
	for {
		response, err := call.Recv()
		now := time.Now()
		if err != nil {
			s.deliver(env, event{ended: true, err: err, during: "stream", at: now})
			return
		}
		s.mu.Lock()
		latencies := make([]time.Duration, len(s.pending))
		for i, sent := range s.pending {
			latencies[i] = now.Sub(sent)
		}
		s.pending = s.pending[:0]
		s.mu.Unlock()
		s.deliver(env, event{response: response, latencies: latencies, at: now})
	}
}

func (s *stream) deliver(env streamEnv, ev event) {
	ev.stream = s
	select {
	case env.events <- ev:
	case <-env.done:
	}
}
