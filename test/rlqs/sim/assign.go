package main

import (
	"sort"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// apply carries out a response's bucket actions, in order ("applied in the given order, from top
// to bottom").
func (c *simClient) apply(response *rlqspb.RateLimitQuotaResponse, now time.Time) {
	settings := c.run.settings
	var changed []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	for _, action := range response.GetBucketAction() {
		i, held := c.held(action.GetBucketId(), now)
		if !held {
			// Envoy ignores an action for a bucket it does not hold ("an unexpected bucket that
			// isn't present in the bucket cache"), and one without a bucket_id.
			c.run.unknownBucketActions.Add(1)
			continue
		}
		entry := Assignment{AtMs: now.UnixMilli(), Client: c.plan.name, Bucket: c.plan.buckets[i]}
		switch a := action.GetBucketAction().(type) {
		case *rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_:
			// "erase the bucket (including its usage data) from the memory": its next request
			// starts the subscription again.
			c.buckets[i] = nil
			entry.Kind, entry.Changed = kindAbandon, true
		case *rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_:
			qa := a.QuotaAssignmentAction
			st, kind, ok := strategyFromProto(qa.GetRateLimitStrategy(), settings.sem)
			describe(&entry, kind, qa, settings.sem)
			if !ok {
				// Envoy logs that requests_per_time_unit is not supported and skips the action:
				// the bucket goes on as it was, its TTL not extended. (A bucket that enforces
				// requests_per_time_unit allows every request; only an assignment could give it
				// one here, so none does.) An assignment without a strategy is skipped alike.
				entry.Ignored = true
				if kind == kindRequestsPerTimeUnit {
					c.run.ignoredRequestsPerTimeUnit.Add(1)
				}
				break
			}
			b := c.buckets[i]
			entry.Changed = settings.assign(b, st, qa.GetAssignmentTimeToLive(), now)
			if entry.Changed && settings.sem.reportOnAssignment {
				// "the data plane must immediately end the current assignment, report the bucket
				// usage, and apply the new assignment"
				changed = append(changed, b.usage(now, settings.sem))
			}
		default:
			entry.Kind, entry.Ignored = kindUnset, true
		}
		c.outcomes.assignment(entry, c.run.listUnchanged, c.run.assignmentLimit)
	}
	if len(changed) > 0 {
		c.run.counters.onAssignment.Add(1)
		c.send(&rlqspb.RateLimitQuotaUsageReports{BucketQuotaUsages: changed})
	}
}

// held finds the bucket an action names, if the client holds it now.
func (c *simClient) held(id *rlqspb.BucketId, now time.Time) (int, bool) {
	i, known := c.index[bucketKey(id.GetBucket())]
	if !known || c.buckets[i] == nil {
		return 0, false
	}
	if !c.run.settings.advance(c.buckets[i], now) {
		c.buckets[i] = nil
		return 0, false
	}
	return i, true
}

// describe fills in what an assignment carried, as received; an unset tokens_per_fill shows as
// what the client takes it for.
func describe(entry *Assignment, kind string, qa *rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction, sem semantics) {
	entry.Kind = kind
	if ttl := qa.GetAssignmentTimeToLive(); ttl != nil {
		ms := ttl.AsDuration().Milliseconds()
		entry.TTLMs = &ms
	}
	switch kind {
	case kindBlanket:
		entry.Blanket = qa.GetRateLimitStrategy().GetBlanketRule().String()
	case kindTokenBucket:
		tb := qa.GetRateLimitStrategy().GetTokenBucket()
		maxTokens, perFill := tb.GetMaxTokens(), sem.unsetTokensPerFill
		if tb.GetTokensPerFill() != nil {
			perFill = tb.GetTokensPerFill().GetValue()
		}
		interval := tb.GetFillInterval().AsDuration().Milliseconds()
		entry.MaxTokens, entry.TokensPerFill, entry.FillIntervalMs = &maxTokens, &perFill, &interval
	}
}

// bucketKey identifies a BucketId whatever the order of its keys ("Buckets { a: 'A', b: 'B' } and
// { b: 'B', a: 'A' } are identical").
func bucketKey(bucket map[string]string) string {
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(bucket[k])
		b.WriteByte(0)
	}
	return b.String()
}
