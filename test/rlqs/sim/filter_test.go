package main

import (
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Each test asserts on periods well inside a phase, so that a loaded machine's delays of a
// hundred milliseconds or so do not change the outcome.

func TestANewBucketIsReportedAtOnce(t *testing.T) {
	t.Parallel()
	fake := startFake(t, nil)
	sc := oneClient(fake.addr, 800*time.Millisecond)
	sc.ReportingIntervalMs = 10_000
	sc.Clients[0].Rps = 20
	sc.Clients[0].Buckets = []map[string]string{orders, {"tenant": "acme", "route": "users"}}
	res := simulate(t, sc)

	messages := fake.received()
	if len(messages) != 2 {
		t.Fatalf("want the two buckets' immediate reports and no other, got %d messages: %+v", len(messages), messages)
	}
	for i, m := range messages {
		if !m.at.Before(time.UnixMilli(res.StartMs).Add(500 * time.Millisecond)) {
			t.Errorf("report %d came %v after the start", i, m.at.Sub(time.UnixMilli(res.StartMs)))
		}
		if len(m.usages) != 1 || !m.usages[0].first() {
			t.Errorf("report %d: want one bucket with its first request, got %+v", i, m.usages)
		}
	}
	if messages[0].usages[0].bucket["route"] != "orders" || messages[1].usages[0].bucket["route"] != "users" {
		t.Errorf("want orders then users, got %+v", messages)
	}
	if messages[0].domain != "d" || messages[1].domain != "" {
		t.Errorf("want the domain in the first message only, got %q then %q", messages[0].domain, messages[1].domain)
	}
	// No assignment and no no_assignment_behavior: allow all.
	if got := total(res); got.Admitted < 10 || got.Denied != 0 {
		t.Errorf("want every request admitted, got %+v", got)
	}
	if res.Reports.Immediate != 2 || res.Reports.Sent != 2 || res.Reports.Dropped != 0 {
		t.Errorf("reports: %+v", res.Reports)
	}
}

func TestEnvoyCodeSendsTheDomainInEveryMessage(t *testing.T) {
	t.Parallel()
	fake := startFake(t, nil)
	sc := oneClient(fake.addr, 700*time.Millisecond)
	sc.Semantics = semanticsEnvoyCode
	simulate(t, sc)
	messages := fake.received()
	if len(messages) < 2 {
		t.Fatalf("want the immediate report and periodic ones, got %+v", messages)
	}
	for i, m := range messages {
		if m.domain != "d" {
			t.Errorf("message %d has domain %q", i, m.domain)
		}
	}
}

func TestNoAssignmentBehavior(t *testing.T) {
	t.Parallel()
	t.Run("DENY_ALL", func(t *testing.T) {
		t.Parallel()
		sc := oneClient(startFake(t, nil).addr, 600*time.Millisecond)
		sc.NoAssignment = &StrategySpec{Blanket: "DENY_ALL"}
		got := total(simulate(t, sc))
		if got.Admitted != 0 || got.Denied < 20 {
			t.Errorf("want every request denied, got %+v", got)
		}
	})
	t.Run("token bucket", func(t *testing.T) {
		t.Parallel()
		sc := oneClient(startFake(t, nil).addr, 1500*time.Millisecond)
		perFill := uint32(5)
		sc.NoAssignment = &StrategySpec{TokenBucket: &TokenBucketSpec{MaxTokens: 5, TokensPerFill: &perFill, FillIntervalMs: 1000}}
		// 5 to start with, and 5 a second after: 12.5.
		if got := total(simulate(t, sc)); got.Admitted < 9 || got.Admitted > 16 || got.Denied < 50 {
			t.Errorf("want about 12 admitted, got %+v", got)
		}
	})
}

func TestTheSameStrategyOnlyExtendsTheTTL(t *testing.T) {
	t.Parallel()
	// Every report gets the same token bucket, 10 at most and 10 a second, for a second.
	fake := startFake(t, func(received) *rlqspb.RateLimitQuotaResponse {
		return respondWith(assign(orders, tokenBucketRule(10, 10, time.Second), time.Second))
	})
	sc := oneClient(fake.addr, 2*time.Second)
	sc.ListUnchanged = true
	res := simulate(t, sc)

	if changed := changedAssignments(res); len(changed) != 1 || changed[0].Kind != kindTokenBucket {
		t.Errorf("want one changed assignment, the first; got %+v", changed)
	}
	if len(res.Assignments) < 5 || res.AssignmentCounts.Unchanged != int64(len(res.Assignments)-1) {
		t.Errorf("want the later ones listed and counted as unchanged, got %+v (%+v)", res.Assignments, res.AssignmentCounts)
	}
	// In the second second the kept bucket admits what it refills, 10. Were it refilled at every
	// assignment (5 a second), it would admit about 50.
	if got := between(res, "a", time.Second, 2*time.Second); got.Admitted < 5 || got.Admitted > 20 {
		t.Errorf("want about 10 admitted in the second second, got %+v", got)
	}
	if res.Reports.OnAssignment != 1 {
		t.Errorf("want one report on the changed assignment, got %+v", res.Reports)
	}
}

func TestADifferentStrategyReplacesTheAssignment(t *testing.T) {
	t.Parallel()
	// DENY_ALL, then from 700 ms a token bucket of 5 that hardly refills.
	t.Run("after a blanket rule, a token bucket starts full", func(t *testing.T) {
		t.Parallel()
		res := switchAt(t, 700*time.Millisecond, denyAllRule, tokenBucketRule(5, 1, time.Minute))
		expectOnly(t, "before the switch", between(res, "a", 200*time.Millisecond, 600*time.Millisecond), false)
		if got := between(res, "a", 600*time.Millisecond, 1800*time.Millisecond); got.Admitted != 5 {
			t.Errorf("want the new bucket's 5 tokens admitted after the switch, got %+v", got)
		}
		if changed := changedAssignments(res); len(changed) != 2 || changed[1].Kind != kindTokenBucket {
			t.Errorf("want two changed assignments, got %+v", changed)
		}
	})
	t.Run("after a token bucket, a token bucket starts as full as it was", func(t *testing.T) {
		t.Parallel()
		// The first bucket is empty long before the switch: so is the second, though it holds 20.
		res := switchAt(t, 700*time.Millisecond, tokenBucketRule(10, 1, time.Minute), tokenBucketRule(20, 1, time.Minute))
		if got := between(res, "a", 600*time.Millisecond, 1800*time.Millisecond); got.Admitted > 2 {
			t.Errorf("want next to nothing admitted after the switch, got %+v", got)
		}
	})
}

// switchAt runs one client for 1.8 s against a server that assigns before until `at`, and after
// from then on, each for a minute.
func switchAt(t *testing.T, at time.Duration, before, after *typev3.RateLimitStrategy) *Result {
	t.Helper()
	var start time.Time
	fake := startFake(t, func(m received) *rlqspb.RateLimitQuotaResponse {
		if start.IsZero() {
			start = m.at
		}
		if m.at.Sub(start) < at {
			return respondWith(assign(orders, before, time.Minute))
		}
		return respondWith(assign(orders, after, time.Minute))
	})
	return simulate(t, oneClient(fake.addr, 1800*time.Millisecond))
}

func TestAbandonErasesTheBucket(t *testing.T) {
	t.Parallel()
	// DENY_ALL at the first report; abandon at the one after; nothing more.
	fake := startFake(t, func(m received) *rlqspb.RateLimitQuotaResponse {
		switch m.seq {
		case 0:
			return respondWith(assign(orders, denyAllRule, time.Minute))
		case 1:
			return respondWith(abandon(orders))
		}
		return nil
	})
	res := simulate(t, oneClient(fake.addr, 1200*time.Millisecond))

	if got := len(firstReports(fake.received())); got != 2 {
		t.Errorf("want the bucket reported as new twice, at the start and after the abandon; got %d", got)
	}
	if res.Reports.Immediate != 2 {
		t.Errorf("reports: %+v", res.Reports)
	}
	// Subscribed again, with no assignment: allow all.
	expectOnly(t, "after the abandon", between(res, "a", 600*time.Millisecond, 1200*time.Millisecond), true)
	if kinds := kindsOf(res.Assignments); len(kinds) != 2 || kinds[1] != kindAbandon {
		t.Errorf("want the assignment then the abandon, got %v", kinds)
	}
}

func TestRequestsPerTimeUnitIsIgnored(t *testing.T) {
	t.Parallel()
	fake := startFake(t, func(received) *rlqspb.RateLimitQuotaResponse {
		return respondWith(assign(orders, requestsPerTimeUnitRule(), time.Minute))
	})
	sc := oneClient(fake.addr, 700*time.Millisecond)
	sc.NoAssignment = &StrategySpec{Blanket: "DENY_ALL"}
	res := simulate(t, sc)
	// Envoy skips the action: the bucket stays in "no assignment", here DENY_ALL.
	expectOnly(t, "all along", total(res), false)
	if res.IgnoredRequestsPerTimeUnit < 2 {
		t.Errorf("want every requests_per_time_unit counted, got %d", res.IgnoredRequestsPerTimeUnit)
	}
	if len(res.Assignments) == 0 || res.Assignments[0].Kind != kindRequestsPerTimeUnit || !res.Assignments[0].Ignored {
		t.Errorf("want them listed as ignored, got %+v", res.Assignments)
	}
}

func TestTokenBucketAdmitsItsTokensPerWindow(t *testing.T) {
	t.Parallel()
	fake := startFake(t, func(m received) *rlqspb.RateLimitQuotaResponse {
		if m.seq == 0 {
			return respondWith(assign(orders, tokenBucketRule(5, 5, time.Second), time.Minute))
		}
		return nil
	})
	sc := oneClient(fake.addr, 4*time.Second)
	sc.WindowMs = 1000
	res := simulate(t, sc)
	full := 0
	for i, w := range res.Windows {
		// Past the first second, the first 5 tokens (and the requests before the assignment) are
		// spent: the bucket admits what it refills.
		if w.Partial || w.StartMs < res.StartMs+1000 {
			continue
		}
		full++
		if got := w.Admitted["a"]; got < 2 || got > 9 {
			t.Errorf("window %d admitted %d, want about 5 (%+v)", i, got, w)
		}
		if w.Denied["a"] < 30 {
			t.Errorf("window %d denied only %d", i, w.Denied["a"])
		}
	}
	if full < 2 {
		t.Errorf("want two whole windows after the first, got %d", full)
	}
}

func kindsOf(assignments []Assignment) []string {
	var kinds []string
	for _, a := range assignments {
		kinds = append(kinds, a.Kind)
	}
	return kinds
}
