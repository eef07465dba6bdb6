package main

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Kinds of a received assignment, as the result names them.
const (
	kindBlanket             = "blanket"
	kindTokenBucket         = "token_bucket"
	kindRequestsPerTimeUnit = "requests_per_time_unit"
	kindAbandon             = "abandon"
	kindUnset               = "unset"
)

// strategy is a rate limit strategy the simulator enforces: a blanket rule or a token bucket.
// It is comparable, so "the same strategy as the current one" is ==.
type strategy struct {
	tokenBucket   bool
	denyAll       bool
	maxTokens     uint32
	tokensPerFill uint32
	fillInterval  time.Duration
}

var allowAll = strategy{}

func strategyFromSpec(spec *StrategySpec) strategy {
	if spec == nil {
		// "If not set, the default behavior is to allow all requests." (no_assignment_behavior)
		return allowAll
	}
	if tb := spec.TokenBucket; tb != nil {
		perFill := uint32(1)
		if tb.TokensPerFill != nil {
			perFill = *tb.TokensPerFill
		}
		return strategy{
			tokenBucket: true, maxTokens: tb.MaxTokens, tokensPerFill: perFill,
			fillInterval: time.Duration(tb.FillIntervalMs) * time.Millisecond,
		}
	}
	return strategy{denyAll: spec.Blanket == "DENY_ALL"}
}

// strategyFromProto reads a rate_limit_strategy of a QuotaAssignmentAction. ok is false for one
// the filter does not enforce: requests_per_time_unit, or none set.
func strategyFromProto(s *typev3.RateLimitStrategy, sem semantics) (st strategy, kind string, ok bool) {
	switch v := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return strategy{denyAll: v.BlanketRule == typev3.RateLimitStrategy_DENY_ALL}, kindBlanket, true
	case *typev3.RateLimitStrategy_TokenBucket:
		perFill := sem.unsetTokensPerFill
		if v.TokenBucket.GetTokensPerFill() != nil {
			perFill = v.TokenBucket.GetTokensPerFill().GetValue()
		}
		return strategy{
			tokenBucket: true, maxTokens: v.TokenBucket.GetMaxTokens(), tokensPerFill: perFill,
			fillInterval: sem.duration(v.TokenBucket.GetFillInterval().AsDuration()),
		}, kindTokenBucket, true
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		return strategy{}, kindRequestsPerTimeUnit, false
	default:
		return strategy{}, kindUnset, false
	}
}

// tokenBucket refills continuously at tokensPerFill per fillInterval, up to maxTokens, as Envoy's
// AtomicTokenBucketImpl does (the filter's token bucket), rather than in steps of tokensPerFill at
// each interval: over a window both admit the same. A request takes one whole token.
type tokenBucket struct {
	tokens float64
	max    float64
	perSec float64
	last   time.Time
}

// newTokenBucket starts full (max_tokens: "the number of tokens that the bucket initially
// contains"), except that one replacing another token bucket starts as full as that one was: Envoy
// does so (rate_limit_quota PR 37624) so that a server can change an assignment often without
// handing out a full burst each time.
func newTokenBucket(s strategy, at time.Time, previous *tokenBucket) *tokenBucket {
	perSec := math.Inf(1)
	switch {
	case s.tokensPerFill == 0:
		perSec = 0
	case s.fillInterval > 0:
		perSec = float64(s.tokensPerFill) / s.fillInterval.Seconds()
	}
	tb := &tokenBucket{tokens: float64(s.maxTokens), max: float64(s.maxTokens), perSec: perSec, last: at}
	if previous != nil && previous.max > 0 {
		previous.refill(at)
		tb.tokens = math.Floor(tb.max * previous.tokens / previous.max)
	}
	return tb
}

func (tb *tokenBucket) refill(now time.Time) {
	if elapsed := now.Sub(tb.last); elapsed > 0 {
		if math.IsInf(tb.perSec, 1) {
			tb.tokens = tb.max
		} else {
			tb.tokens = math.Min(tb.max, tb.tokens+elapsed.Seconds()*tb.perSec)
		}
		tb.last = now
	}
}

func (tb *tokenBucket) take(now time.Time) bool {
	tb.refill(now)
	if tb.tokens < 1 {
		return false
	}
	tb.tokens--
	return true
}
