package main

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Result is the one JSON object written to standard output.
type Result struct {
	Semantics string `json:"semantics"`
	// The simulation's start and end, epoch milliseconds.
	StartMs int64    `json:"startMs"`
	EndMs   int64    `json:"endMs"`
	Windows []Window `json:"windows"`
	// The changed and the ignored assignments (every one with listUnchanged), the oldest
	// assignmentLimit of them; the counts take in every one.
	Assignments         []Assignment     `json:"assignments"`
	AssignmentsUnlisted int64            `json:"assignmentsUnlisted"`
	AssignmentCounts    AssignmentCounts `json:"assignmentCounts"`
	Reports             Reports          `json:"reports"`
	// Streams opened again after one ended, by client; absent with perClient: false.
	Reconnects                 map[string]int `json:"reconnects,omitempty"`
	ReconnectsTotal            int            `json:"reconnectsTotal"`
	StreamErrors               []StreamError  `json:"streamErrors"`
	StreamErrorsUnlisted       int64          `json:"streamErrorsUnlisted"`
	IgnoredRequestsPerTimeUnit int64          `json:"ignoredRequestsPerTimeUnit"`
	// Actions for a bucket the client did not hold (or without a bucket_id), which it ignored.
	UnknownBucketActions int64 `json:"unknownBucketActions"`
}

// Window is one epoch-aligned window; partial when the run covered only part of it.
type Window struct {
	StartMs  int64             `json:"startMs"`
	Partial  bool              `json:"partial"`
	Admitted map[string]uint64 `json:"admitted,omitempty"`
	Denied   map[string]uint64 `json:"denied,omitempty"`
	Total    counts            `json:"total"`
}

// AssignmentCounts counts the bucket actions the clients received (for buckets they held): those
// that changed a bucket's strategy or abandoned it, those that only extended a TTL, and those
// ignored.
type AssignmentCounts struct {
	Changed   int64 `json:"changed"`
	Unchanged int64 `json:"unchanged"`
	Ignored   int64 `json:"ignored"`
}

// Assignment is one bucket action a client received.
type Assignment struct {
	AtMs           int64             `json:"atMs"`
	Client         string            `json:"client"`
	Bucket         map[string]string `json:"bucket"`
	Kind           string            `json:"kind"`
	Blanket        string            `json:"blanket,omitempty"`
	MaxTokens      *uint32           `json:"maxTokens,omitempty"`
	TokensPerFill  *uint32           `json:"tokensPerFill,omitempty"`
	FillIntervalMs *int64            `json:"fillIntervalMs,omitempty"`
	// Absent when the assignment has no assignment_time_to_live.
	TTLMs   *int64 `json:"ttlMs,omitempty"`
	Changed bool   `json:"changed"`
	// Set for an action the client skipped: requests_per_time_unit, or no strategy.
	Ignored bool `json:"ignored,omitempty"`
}

// Reports counts the usage reports: by why they were made, and whether they went out.
type Reports struct {
	Sent         int64   `json:"sent"`
	Dropped      int64   `json:"dropped"`
	Immediate    int64   `json:"immediate"`
	Periodic     int64   `json:"periodic"`
	OnAssignment int64   `json:"onAssignment"`
	LatencyMs    Latency `json:"latencyMs"`
}

// Latency is from sending a report to the first response after it on its stream.
type Latency struct {
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
	Count int     `json:"count"`
}

// StreamError is a stream that ended, or failed to open, other than by the client's own close.
type StreamError struct {
	AtMs    int64  `json:"atMs"`
	Client  string `json:"client"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// "open" or "stream".
	During string `json:"during"`
}

func buildResult(r *runState, clients []*simClient, perClient bool) *Result {
	end := r.start.Add(r.duration)
	res := &Result{
		Semantics: r.semantics, StartMs: r.start.UnixMilli(), EndMs: end.UnixMilli(),
		Windows:     windows(r.origin, r.windowMs, r.start.UnixMilli(), end.UnixMilli(), perClient),
		Assignments: []Assignment{}, StreamErrors: []StreamError{},
		IgnoredRequestsPerTimeUnit: r.ignoredRequestsPerTimeUnit.Load(),
		UnknownBucketActions:       r.unknownBucketActions.Load(),
	}
	if perClient {
		res.Reconnects = map[string]int{}
	}
	var latencies []time.Duration
	for _, c := range clients {
		o := &c.outcomes
		name := c.plan.name
		for i := range res.Windows {
			var n counts
			if i < len(o.windows) {
				n = o.windows[i]
			}
			w := &res.Windows[i]
			w.Total.Admitted += n.Admitted
			w.Total.Denied += n.Denied
			if perClient {
				w.Admitted[name], w.Denied[name] = n.Admitted, n.Denied
			}
		}
		if perClient {
			res.Reconnects[name] = o.reconnects
		}
		res.ReconnectsTotal += o.reconnects
		res.Assignments = append(res.Assignments, o.assignments...)
		res.AssignmentCounts.Changed += o.assignmentCounts.Changed
		res.AssignmentCounts.Unchanged += o.assignmentCounts.Unchanged
		res.AssignmentCounts.Ignored += o.assignmentCounts.Ignored
		res.StreamErrors = append(res.StreamErrors, o.streamErrors...)
		res.StreamErrorsUnlisted += o.unlistedStreamErrors
		latencies = append(latencies, o.latencies...)
	}
	slices.SortStableFunc(res.Assignments, func(a, b Assignment) int { return cmp.Compare(a.AtMs, b.AtMs) })
	res.Assignments = res.Assignments[:min(len(res.Assignments), r.assignmentLimit)]
	counted := res.AssignmentCounts
	res.AssignmentsUnlisted = counted.Changed + counted.Unchanged + counted.Ignored - int64(len(res.Assignments))
	slices.SortStableFunc(res.StreamErrors, func(a, b StreamError) int { return cmp.Compare(a.AtMs, b.AtMs) })
	if over := len(res.StreamErrors) - maxListedStreamErrors; over > 0 {
		res.StreamErrors = res.StreamErrors[:maxListedStreamErrors]
		res.StreamErrorsUnlisted += int64(over)
	}
	c := r.counters
	res.Reports = Reports{
		Sent: c.sent.Load(), Dropped: c.dropped.Load(), Immediate: c.immediate.Load(),
		Periodic: c.periodic.Load(), OnAssignment: c.onAssignment.Load(), LatencyMs: summarize(latencies),
	}
	return res
}

// windows lays out every window from the one holding startMs to the one holding the last
// millisecond before endMs; with per-client maps to fill in when perClient is set.
func windows(origin, windowMs, startMs, endMs int64, perClient bool) []Window {
	var out []Window
	for at := origin; at < endMs; at += windowMs {
		w := Window{StartMs: at, Partial: at < startMs || at+windowMs > endMs}
		if perClient {
			w.Admitted, w.Denied = map[string]uint64{}, map[string]uint64{}
		}
		out = append(out, w)
	}
	return out
}

// summarize gives the nearest-rank percentiles, in milliseconds.
func summarize(latencies []time.Duration) Latency {
	if len(latencies) == 0 {
		return Latency{}
	}
	slices.Sort(latencies)
	rank := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(latencies)))) - 1
		return milliseconds(latencies[min(max(i, 0), len(latencies)-1)])
	}
	return Latency{P50: rank(0.50), P99: rank(0.99), Max: milliseconds(latencies[len(latencies)-1]), Count: len(latencies)}
}

func milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
