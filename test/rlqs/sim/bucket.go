package main

import (
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// phase is a bucket's state in the filter: rate_limit_quota.proto's "no assignment" (after the
// first request, before the first assignment), an "active" assignment, or an "expired" one while
// its expired_assignment_behavior applies.
type phase uint8

const (
	noAssignment phase = iota
	active
	expired
)

// bucket is one BucketId's state in one client: its usage since the last report, and the strategy
// it enforces. A bucket the client does not hold (never seen, or abandoned) is nil.
type bucket struct {
	id              *rlqspb.BucketId
	allowed, denied uint64
	lastReport      time.Time
	phase           phase
	strategy        strategy
	tokens          *tokenBucket
	// The end of the active assignment (when expires) or of the expired assignment behavior.
	deadline time.Time
	expires  bool
}

// bucketSettings is the filter's RateLimitQuotaBucketSettings that the scenario sets, the same for
// every bucket, with the semantics chosen for the run.
type bucketSettings struct {
	noAssignment strategy
	// nil when expired_assignment_behavior is not set.
	expired *expiredBehavior
	sem     semantics
}

type expiredBehavior struct {
	reuseLast bool
	fallback  strategy
	// expired_assignment_behavior_timeout: "If not set, defaults to zero, and the bucket is
	// abandoned immediately."
	timeout time.Duration
}

func newBucketSettings(sc *Scenario) *bucketSettings {
	s := &bucketSettings{noAssignment: strategyFromSpec(sc.NoAssignment), sem: semanticsByName[sc.semanticsName()]}
	if e := sc.ExpiredAssignment; e != nil {
		behavior := &expiredBehavior{
			reuseLast: e.ReuseLast,
			timeout:   s.sem.duration(time.Duration(e.TimeoutMs) * time.Millisecond),
		}
		if e.Fallback != nil {
			behavior.fallback = strategyFromSpec(e.Fallback)
		}
		if !e.ReuseLast || s.sem.honourReuseLast {
			s.expired = behavior
		}
	}
	return s
}

// newBucket is the state of a bucket at its first request: "no assignment", reported at once.
func (s *bucketSettings) newBucket(id *rlqspb.BucketId, now time.Time) *bucket {
	b := &bucket{id: id, lastReport: now}
	b.enforce(s.noAssignment, now, false)
	return b
}

// enforce makes st the bucket's strategy. The same strategy keeps its token bucket's tokens; a
// new token bucket takes over the fill of the one it replaces when carry is set.
func (b *bucket) enforce(st strategy, at time.Time, carry bool) {
	if b.strategy == st && (b.tokens != nil) == st.tokenBucket {
		return
	}
	previous := b.tokens
	if !carry {
		previous = nil
	}
	b.strategy, b.tokens = st, nil
	if st.tokenBucket {
		b.tokens = newTokenBucket(st, at, previous)
	}
}

// decide admits or denies one request now, and counts it for the next report.
func (b *bucket) decide(now time.Time) bool {
	allowed := !b.strategy.denyAll
	if b.strategy.tokenBucket {
		allowed = b.tokens.take(now)
	}
	if allowed {
		b.allowed++
	} else {
		b.denied++
	}
	return allowed
}

// usage is the bucket's entry of a usage report: the requests since its last report, which it
// then forgets.
func (b *bucket) usage(now time.Time, sem semantics) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           b.id,
		TimeElapsed:        sem.elapsed(now.Sub(b.lastReport)),
		NumRequestsAllowed: b.allowed,
		NumRequestsDenied:  b.denied,
	}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return u
}

// advance moves the bucket through every expiry due by now, each at the time it fell due. It
// returns false when the bucket was abandoned on the way.
func (s *bucketSettings) advance(b *bucket, now time.Time) bool {
	for {
		switch {
		case b.phase == active && b.expires && !now.Before(b.deadline):
			if !s.expire(b, b.deadline) {
				return false
			}
		case b.phase == expired && !now.Before(b.deadline):
			if !s.endExpired(b, b.deadline) {
				return false
			}
		default:
			return true
		}
	}
}

// expire: the active assignment's TTL ran out at `at`; the expired assignment behavior applies.
func (s *bucketSettings) expire(b *bucket, at time.Time) bool {
	e := s.expired
	if e == nil {
		return s.endExpired(b, at)
	}
	if !e.reuseLast {
		b.enforce(e.fallback, at, true)
	}
	b.phase, b.deadline = expired, at.Add(e.timeout)
	return true
}

// endExpired: no assignment came before the expired assignment behavior's end.
func (s *bucketSettings) endExpired(b *bucket, at time.Time) bool {
	if s.sem.abandonWhenExpired {
		return false
	}
	b.phase, b.expires = noAssignment, false
	b.enforce(s.noAssignment, at, false)
	return true
}

// assign applies a quota assignment received now. changed is false when it only extends the
// TTL: the same strategy as the bucket's active (not expired) assignment.
func (s *bucketSettings) assign(b *bucket, st strategy, ttl *durationpb.Duration, now time.Time) (changed bool) {
	changed = b.phase != active || b.strategy != st
	b.enforce(st, now, true)
	b.phase = active
	b.deadline, b.expires = s.sem.ttl(ttl, now)
	return changed
}
