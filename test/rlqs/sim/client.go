package main

import (
	"context"
	"math/rand/v2"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
)

// minWake is the shortest sleep of a client's loop: a client faster than one request per minWake
// sends its requests in small batches, which keeps a fleet's wake-ups within what two cores do.
const minWake = 5 * time.Millisecond

// closeWait is how long a stopping client waits for the server to end its stream after CloseSend.
const closeWait = 2 * time.Second

// simClient is one simulated Envoy. Everything but its streams' goroutines runs in its loop, so
// its state needs no lock.
type simClient struct {
	plan     clientPlan
	run      *runState
	conn     *grpc.ClientConn
	rng      *rand.Rand
	ids      []*rlqspb.BucketId
	index    map[string]int
	buckets  []*bucket
	next     int
	stream   *stream
	opened   int
	events   chan event
	done     chan struct{}
	outcomes clientOutcomes
}

func newSimClient(plan clientPlan, run *runState, conn *grpc.ClientConn, seed uint64) *simClient {
	c := &simClient{
		plan: plan, run: run, conn: conn,
		rng:     rand.New(rand.NewPCG(seed, hashString(plan.name))),
		index:   make(map[string]int, len(plan.buckets)),
		buckets: make([]*bucket, len(plan.buckets)),
		events:  make(chan event, 64),
		done:    make(chan struct{}),
	}
	for i, b := range plan.buckets {
		c.ids = append(c.ids, &rlqspb.BucketId{Bucket: b})
		c.index[bucketKey(b)] = i
	}
	return c
}

// loop runs the client from its start to its stop: requests at its rate, a report every
// reporting interval, and whatever its stream brings in between.
func (c *simClient) loop(ctx context.Context) {
	defer close(c.done)
	defer c.conn.Close()
	start, stop := c.run.start.Add(c.plan.start), c.run.start.Add(c.plan.stop)
	if !sleepUntil(ctx, start) || !time.Now().Before(stop) {
		return
	}
	c.open()
	interval := c.run.reportingInterval
	nextRequest, nextReport := time.Now(), time.Now().Add(interval)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		now := time.Now()
		if !now.Before(stop) {
			break
		}
		for !nextRequest.After(now) {
			c.request(now)
			nextRequest = nextRequest.Add(c.gap())
		}
		if !nextReport.After(now) {
			c.report(now)
			nextReport = nextReport.Add(interval)
			if !nextReport.After(now) {
				nextReport = now.Add(interval)
			}
		}
		timer.Reset(max(earliest(nextRequest, nextReport, stop).Sub(now), minWake))
		select {
		case <-timer.C:
		case ev := <-c.events:
			c.handle(ev)
		case <-ctx.Done():
			c.close()
			return
		}
	}
	c.close()
}

// gap is the time to the next request: 1/rps, give or take jitter of it.
func (c *simClient) gap() time.Duration {
	gap := float64(time.Second) / c.plan.rps
	if c.plan.jitter > 0 {
		gap *= 1 + c.plan.jitter*(2*c.rng.Float64()-1)
	}
	return time.Duration(gap)
}

// request makes one request in the next bucket, round robin. A bucket it does not hold is created
// and reported at once, this first request included: "When the first request is matched to a
// bucket with no assignment, the data plane is to report the request immediately".
func (c *simClient) request(now time.Time) {
	i := c.next
	c.next = (c.next + 1) % len(c.ids)
	settings := c.run.settings
	b := c.buckets[i]
	if b != nil && !settings.advance(b, now) {
		b = nil
	}
	fresh := b == nil
	if fresh {
		b = settings.newBucket(c.ids[i], now)
		c.buckets[i] = b
	}
	c.outcomes.count(c.run.windowIndex(now), b.decide(now))
	if fresh {
		c.run.counters.immediate.Add(1)
		c.send(&rlqspb.RateLimitQuotaUsageReports{
			BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{b.usage(now, settings.sem)},
		})
	}
}

// report sends the periodic report of every bucket held. Envoy opens its stream again here, on its
// reporting timer, when the last one ended: the report becomes the new stream's first message.
func (c *simClient) report(now time.Time) {
	settings := c.run.settings
	reports := &rlqspb.RateLimitQuotaUsageReports{}
	for i, b := range c.buckets {
		if b == nil {
			continue
		}
		if !settings.advance(b, now) {
			c.buckets[i] = nil
			continue
		}
		reports.BucketQuotaUsages = append(reports.BucketQuotaUsages, b.usage(now, settings.sem))
	}
	if c.stream == nil {
		c.open()
	}
	if len(reports.BucketQuotaUsages) == 0 && !settings.sem.sendEmptyReports {
		return
	}
	c.run.counters.periodic.Add(1)
	c.send(reports)
}

// send hands a report to the stream; with no stream, or a stream too slow to take it, it is lost,
// as Envoy loses a report it cannot send.
func (c *simClient) send(reports *rlqspb.RateLimitQuotaUsageReports) {
	if c.stream == nil {
		c.run.counters.dropped.Add(1)
		return
	}
	select {
	case c.stream.out <- reports:
	default:
		c.run.counters.dropped.Add(1)
	}
}

func (c *simClient) open() {
	c.stream = openStream(context.Background(), streamEnv{
		conn: c.conn, domain: c.run.domain, every: c.run.settings.sem.domainInEveryMessage,
		counters: c.run.counters, events: c.events, done: c.done,
	})
}

func (c *simClient) handle(ev event) {
	if ev.stream != c.stream {
		return
	}
	switch {
	case ev.opened:
		if c.opened > 0 {
			c.outcomes.reconnects++
		}
		c.opened++
	case ev.ended:
		c.outcomes.streamEnded(ev, c.plan.name, false)
		c.finish()
	case ev.response != nil:
		c.outcomes.latencies = append(c.outcomes.latencies, ev.latencies...)
		c.apply(ev.response, time.Now())
	}
}

// finish closes the stream's outbox and forgets the stream.
func (c *simClient) finish() {
	close(c.stream.out)
	c.stream.cancel()
	c.stream = nil
}

// close ends the client's stream cleanly: CloseSend, then the server's end of it, for a while.
func (c *simClient) close() {
	if c.stream == nil {
		return
	}
	s := c.stream
	close(s.out)
	deadline := time.NewTimer(closeWait)
	defer deadline.Stop()
	for {
		select {
		case ev := <-c.events:
			if ev.stream != s {
				continue
			}
			c.outcomes.latencies = append(c.outcomes.latencies, ev.latencies...)
			if ev.ended {
				c.outcomes.streamEnded(ev, c.plan.name, true)
				s.cancel()
				c.stream = nil
				return
			}
		case <-deadline.C:
			s.cancel()
			c.stream = nil
			return
		}
	}
}

func earliest(times ...time.Time) time.Time {
	first := times[0]
	for _, t := range times[1:] {
		if t.Before(first) {
			first = t
		}
	}
	return first
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
