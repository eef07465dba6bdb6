package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

func TestReconnectsAfterTheServerRestarts(t *testing.T) {
	t.Parallel()
	// DENY_ALL for 10 s at every report: the outage is shorter than the TTL.
	respond := func(received) *rlqspb.RateLimitQuotaResponse {
		return respondWith(assign(orders, denyAllRule, 10*time.Second))
	}
	fake := startFake(t, respond)
	sc := oneClient(fake.addr, 3*time.Second)
	done := make(chan *Result, 1)
	go func() {
		res, err := run(context.Background(), &sc)
		if err != nil {
			t.Errorf("run: %v", err)
		}
		done <- res
	}()
	time.Sleep(800 * ms)
	fake.srv.Stop()
	time.Sleep(700 * ms)
	again := fake.restart(t)
	res := <-done
	if res == nil {
		return
	}

	if res.Reconnects["a"] < 1 {
		t.Errorf("want a reconnect, got %v", res.Reconnects)
	}
	if len(res.StreamErrors) == 0 || res.StreamErrors[0].Code != "UNAVAILABLE" {
		t.Errorf("want the stream's end as UNAVAILABLE, got %+v", res.StreamErrors)
	}
	messages := again.received()
	if len(messages) == 0 {
		t.Fatal("the restarted server got no report")
	}
	first := messages[0]
	if first.domain != "d" || len(first.usages) != 1 || first.usages[0].first() {
		t.Errorf("want the new stream to open with the domain and a periodic report of the kept bucket, got %+v", first)
	}
	if res.Reports.Immediate != 1 {
		t.Errorf("want the bucket kept (no new subscription), got %+v", res.Reports)
	}
	// The assignment outlives the outage: no request admitted once it came.
	expectOnly(t, "from 300 ms on", between(res, "a", 300*ms, 3*time.Second), false)
}

func TestReconnectsAfterGoAway(t *testing.T) {
	t.Parallel()
	// The server drains every connection after 400 ms, as at a max connection age: GOAWAY, and
	// the connection closed a little later (grpc-go takes about a second and a half in all).
	age := grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: 400 * ms, MaxConnectionAgeGrace: 100 * ms,
	})
	fake := startFake(t, func(received) *rlqspb.RateLimitQuotaResponse {
		return respondWith(assign(orders, denyAllRule, 10*time.Second))
	}, age)
	res := simulate(t, oneClient(fake.addr, 2500*ms))
	if res.Reconnects["a"] < 1 || len(res.StreamErrors) == 0 || !strings.Contains(res.StreamErrors[0].Message, "goaway") {
		t.Errorf("want a reconnect after the GOAWAY, got %v (%+v)", res.Reconnects, res.StreamErrors)
	}
	if res.Reports.Immediate != 1 {
		t.Errorf("want the bucket kept across streams, got %+v", res.Reports)
	}
	expectOnly(t, "from 300 ms on", between(res, "a", 300*ms, 2500*ms), false)
}

func TestClientsJoinAndLeave(t *testing.T) {
	t.Parallel()
	fake := startFake(t, nil)
	sc := oneClient(fake.addr, 1500*ms)
	stop := int64(1000)
	sc.Clients = append(sc.Clients, ClientSpec{
		Name: "b", Buckets: []map[string]string{orders}, Rps: 100, StartMs: 500, StopMs: &stop,
	})
	res := simulate(t, sc)
	if got := between(res, "b", 0, 400*ms); got != (counts{}) {
		t.Errorf("b made requests before it joined: %+v", got)
	}
	if got := between(res, "b", 1100*ms, 1500*ms); got != (counts{}) {
		t.Errorf("b made requests after it left: %+v", got)
	}
	expectOnly(t, "b while it ran", between(res, "b", 600*ms, 900*ms), true)
	if len(res.StreamErrors) != 0 {
		t.Errorf("want clean closes, got %+v", res.StreamErrors)
	}
	if fake.closed() != 2 {
		t.Errorf("want both streams closed by their clients, got %d", fake.closed())
	}
}

func TestAFleetOfAThousandClients(t *testing.T) {
	if raceEnabled {
		t.Skip("too slow under the race detector to keep its timing")
	}
	fake := startFake(t, func(m received) *rlqspb.RateLimitQuotaResponse {
		if m.seq == 0 {
			return respondWith(assign(orders, allowAllRule, 10*time.Second))
		}
		return nil
	})
	sc := oneClient(fake.addr, 2500*ms)
	perClient := false
	sc.PerClient = &perClient
	sc.ReportingIntervalMs = 500
	// Starts spread over half a second, as a fleet's would be.
	sc.Clients[0].Rps, sc.Clients[0].Count, sc.Clients[0].SpreadMs = 2, 1000, 500
	res := simulate(t, sc)

	// 2 a second for 2.25 s on average, each: 4500.
	if got := total(res).Admitted; got < 3500 || got > 5500 {
		t.Errorf("want about 4500 admitted, got %d", got)
	}
	if got := len(firstReports(fake.received())); got != 1000 {
		t.Errorf("want every client's immediate report at the server, got %d", got)
	}
	if res.Reports.Immediate != 1000 || res.Reports.Dropped != 0 || len(res.StreamErrors) != 0 {
		t.Errorf("want no report lost and no error; got %+v, %+v", res.Reports, res.StreamErrors)
	}
	// Every client gets its assignment but for a loaded machine's slowest answers.
	if got := res.AssignmentCounts.Changed; got < 900 {
		t.Errorf("want about 1000 assignments, got %d (latency %+v)", got, res.Reports.LatencyMs)
	}
	if res.Reconnects != nil || res.Windows[0].Admitted != nil {
		t.Errorf("perClient false still gave per-client maps: %v, %+v", res.Reconnects, res.Windows[0])
	}
}

func TestAClientWithThousandsOfBuckets(t *testing.T) {
	if raceEnabled {
		t.Skip("too slow under the race detector to keep its timing")
	}
	// Every bucket of every report gets ALLOW_ALL.
	fake := startFake(t, func(m received) *rlqspb.RateLimitQuotaResponse {
		var actions []*rlqspb.RateLimitQuotaResponse_BucketAction
		for _, u := range m.usages {
			actions = append(actions, assign(u.bucket, allowAllRule, 10*time.Second))
		}
		return respondWith(actions...)
	})
	sc := oneClient(fake.addr, 1500*ms)
	sc.ReportingIntervalMs = 500
	sc.Clients[0].Rps = 3000
	sc.Clients[0].Buckets = nil
	for i := range 3000 {
		sc.Clients[0].Buckets = append(sc.Clients[0].Buckets, map[string]string{"tenant": "t" + strconv.Itoa(i%26), "n": strconv.Itoa(i)})
	}
	res := simulate(t, sc)

	if res.Reports.Immediate != 3000 || res.Reports.Dropped != 0 {
		t.Errorf("reports: %+v", res.Reports)
	}
	if got := res.AssignmentCounts.Changed; got != 3000 {
		t.Errorf("want 3000 changed assignments, got %+v", res.AssignmentCounts)
	}
	if len(res.Assignments) != defaultAssignmentLimit || res.AssignmentsUnlisted < 2000 {
		t.Errorf("want the first %d listed and the rest counted, got %d and %d",
			defaultAssignmentLimit, len(res.Assignments), res.AssignmentsUnlisted)
	}
	biggest := 0
	for _, m := range fake.received() {
		biggest = max(biggest, len(m.usages))
	}
	if biggest != 3000 {
		t.Errorf("want a periodic report of all 3000 buckets, the biggest had %d", biggest)
	}
}

func TestNoServerIsAnError(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	err = waitForServer(context.Background(), addr, 300*ms)
	if err == nil || !strings.Contains(err.Error(), "cannot connect to "+addr) {
		t.Errorf("want cannot connect, got %v", err)
	}
}
