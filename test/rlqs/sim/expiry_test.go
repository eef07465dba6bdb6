package main

import (
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

const ms = time.Millisecond

// assignOnce is a server that answers the first report only, with this assignment for a second.
func assignOnce(t *testing.T, rule *typev3.RateLimitStrategy) *fakeServer {
	return startFake(t, func(m received) *rlqspb.RateLimitQuotaResponse {
		if m.stream == 1 && m.seq == 0 {
			return respondWith(assign(orders, rule, time.Second))
		}
		return nil
	})
}

// expectPhase is a stretch of the run in which every request must be admitted, or every one denied.
type expectPhase struct {
	from, to time.Duration
	admitted bool
}

func expectPhases(t *testing.T, res *Result, phases ...expectPhase) {
	t.Helper()
	for _, p := range phases {
		expectOnly(t, p.from.String()+" to "+p.to.String(), between(res, "a", p.from, p.to), p.admitted)
	}
}

func TestExpiredAssignment(t *testing.T) {
	t.Parallel()
	t.Run("unset: the bucket is abandoned, and subscribes again", func(t *testing.T) {
		t.Parallel()
		fake := assignOnce(t, denyAllRule)
		res := simulate(t, oneClient(fake.addr, 2*time.Second))
		expectPhases(t, res, expectPhase{200 * ms, 900 * ms, false}, expectPhase{1300 * ms, 2000 * ms, true})
		firsts := firstReports(fake.received())
		if len(firsts) != 2 || firsts[1].at.Sub(time.UnixMilli(res.StartMs)) < 900*ms {
			t.Errorf("want a new immediate report once the TTL ran out, got %+v", firsts)
		}
	})
	t.Run("reuse_last_assignment, then abandoned", func(t *testing.T) {
		t.Parallel()
		sc := oneClient(assignOnce(t, denyAllRule).addr, 2800*ms)
		sc.ExpiredAssignment = &ExpiredSpec{ReuseLast: true, TimeoutMs: 1000}
		res := simulate(t, sc)
		expectPhases(t, res, expectPhase{200 * ms, 1900 * ms, false}, expectPhase{2300 * ms, 2800 * ms, true})
	})
	t.Run("fallback_rate_limit, then abandoned", func(t *testing.T) {
		t.Parallel()
		sc := oneClient(assignOnce(t, allowAllRule).addr, 2800*ms)
		sc.ExpiredAssignment = &ExpiredSpec{Fallback: &StrategySpec{Blanket: "DENY_ALL"}, TimeoutMs: 1000}
		res := simulate(t, sc)
		expectPhases(t, res,
			expectPhase{200 * ms, 900 * ms, true},
			expectPhase{1300 * ms, 1900 * ms, false},
			expectPhase{2300 * ms, 2800 * ms, true})
	})
	t.Run("a fallback without a timeout abandons at once", func(t *testing.T) {
		t.Parallel()
		sc := oneClient(assignOnce(t, denyAllRule).addr, 2*time.Second)
		sc.ExpiredAssignment = &ExpiredSpec{Fallback: &StrategySpec{Blanket: "DENY_ALL"}}
		res := simulate(t, sc)
		expectPhases(t, res, expectPhase{200 * ms, 900 * ms, false}, expectPhase{1300 * ms, 2000 * ms, true})
	})
}

func TestExpiredAssignmentInEnvoyCode(t *testing.T) {
	t.Parallel()
	envoyCode := func(fake *fakeServer, duration time.Duration) Scenario {
		sc := oneClient(fake.addr, duration)
		sc.Semantics = semanticsEnvoyCode
		sc.NoAssignment = &StrategySpec{Blanket: "DENY_ALL"}
		return sc
	}
	t.Run("unset: back to the no-assignment behavior, the bucket kept", func(t *testing.T) {
		t.Parallel()
		fake := assignOnce(t, allowAllRule)
		res := simulate(t, envoyCode(fake, 2*time.Second))
		expectPhases(t, res, expectPhase{200 * ms, 900 * ms, true}, expectPhase{1300 * ms, 2000 * ms, false})
		if res.Reports.Immediate != 1 {
			t.Errorf("want no new subscription, got %+v", res.Reports)
		}
		last := fake.received()[len(fake.received())-1]
		if len(last.usages) != 1 || last.usages[0].denied == 0 {
			t.Errorf("want the bucket still reported, its requests denied; got %+v", last)
		}
	})
	t.Run("reuse_last_assignment is not acted on", func(t *testing.T) {
		t.Parallel()
		sc := envoyCode(assignOnce(t, allowAllRule), 2*time.Second)
		sc.ExpiredAssignment = &ExpiredSpec{ReuseLast: true, TimeoutMs: 5000}
		res := simulate(t, sc)
		expectPhases(t, res, expectPhase{200 * ms, 900 * ms, true}, expectPhase{1300 * ms, 2000 * ms, false})
	})
	t.Run("fallback_rate_limit, then the no-assignment behavior", func(t *testing.T) {
		t.Parallel()
		sc := envoyCode(assignOnce(t, denyAllRule), 2800*ms)
		sc.ExpiredAssignment = &ExpiredSpec{Fallback: &StrategySpec{Blanket: "ALLOW_ALL"}, TimeoutMs: 1000}
		res := simulate(t, sc)
		expectPhases(t, res,
			expectPhase{200 * ms, 900 * ms, false},
			expectPhase{1300 * ms, 1900 * ms, true},
			expectPhase{2300 * ms, 2800 * ms, false})
	})
}
