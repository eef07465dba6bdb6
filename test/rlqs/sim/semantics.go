package main

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	semanticsProto     = "proto"
	semanticsEnvoyCode = "envoy-code"
)

// semantics is where the API's comments (rlqs.proto, rate_limit_quota.proto) and Envoy's filter
// code (source/extensions/filters/http/rate_limit_quota) part ways. A run picks one, once: "proto"
// by default, or "envoy-code" to play the filter as it is built today.
type semantics struct {
	// Without an expired_assignment_behavior, and when its timeout runs out, the proto abandons
	// the bucket (its next request subscribes again, like a new bucket's); Envoy's code keeps it
	// and falls back to the no_assignment_behavior, reporting on.
	abandonWhenExpired bool
	// Envoy's code builds no fallback from reuse_last_assignment: the bucket is treated as if no
	// expired_assignment_behavior were set.
	honourReuseLast bool
	// Envoy's code reads assignment_time_to_live, expired_assignment_behavior_timeout and
	// TokenBucket.fill_interval in whole seconds, and writes time_elapsed in whole seconds.
	wholeSeconds bool
	// The proto: an unset assignment_time_to_live never expires. Envoy's code reads it as 0s, so
	// the assignment expires at once.
	unsetTTLNeverExpires bool
	// The proto: an unset tokens_per_fill is 1. Envoy's code reads it as 0: no refill.
	unsetTokensPerFill uint32
	// The proto: on a changed assignment, "report the bucket usage". Envoy's code does not.
	reportOnAssignment bool
	// The proto: the domain goes in the first message of a stream only. Envoy's code sets it in
	// every message.
	domainInEveryMessage bool
	// Envoy's code sends its periodic report even when it holds no bucket.
	sendEmptyReports bool
}

var semanticsByName = map[string]semantics{
	semanticsProto: {
		abandonWhenExpired:   true,
		honourReuseLast:      true,
		unsetTTLNeverExpires: true,
		unsetTokensPerFill:   1,
		reportOnAssignment:   true,
	},
	semanticsEnvoyCode: {
		wholeSeconds:         true,
		domainInEveryMessage: true,
		sendEmptyReports:     true,
	},
}

// duration reads a duration of the API the way this semantics does.
func (s semantics) duration(d time.Duration) time.Duration {
	if s.wholeSeconds {
		return d.Truncate(time.Second)
	}
	return d
}

// ttl is when an assignment received now expires; expires is false for one that never does.
func (s semantics) ttl(ttl *durationpb.Duration, now time.Time) (deadline time.Time, expires bool) {
	if ttl == nil && s.unsetTTLNeverExpires {
		return time.Time{}, false
	}
	return now.Add(s.duration(ttl.AsDuration())), true
}

// elapsed is a usage report's time_elapsed.
func (s semantics) elapsed(d time.Duration) *durationpb.Duration {
	return durationpb.New(s.duration(d))
}
