package main

import (
	"testing"
	"time"
)

var orders = map[string]string{"tenant": "acme", "route": "orders"}

// oneClient is a scenario of one client "a" at 100 requests a second in the orders bucket, with
// 100 ms windows and reports every 200 ms.
func oneClient(addr string, duration time.Duration) Scenario {
	return Scenario{
		Addr: addr, Domain: "d", DurationMs: duration.Milliseconds(), WindowMs: 100,
		ReportingIntervalMs: 200,
		Clients: []ClientSpec{{
			Name: "a", Buckets: []map[string]string{orders}, Rps: 100,
		}},
	}
}

// between sums client's requests in the windows that lie wholly in [from, to) of the run.
func between(res *Result, client string, from, to time.Duration) counts {
	var sum counts
	for _, w := range res.Windows {
		start := time.Duration(w.StartMs-res.StartMs) * time.Millisecond
		end := start + time.Duration(windowLength(res))*time.Millisecond
		if start >= from && end <= to {
			sum.Admitted += w.Admitted[client]
			sum.Denied += w.Denied[client]
		}
	}
	return sum
}

func windowLength(res *Result) int64 {
	if len(res.Windows) < 2 {
		return res.EndMs - res.StartMs
	}
	return res.Windows[1].StartMs - res.Windows[0].StartMs
}

func total(res *Result) counts {
	var sum counts
	for _, w := range res.Windows {
		sum.Admitted += w.Total.Admitted
		sum.Denied += w.Total.Denied
	}
	return sum
}

// firstReports are the messages that carry a new bucket's immediate report.
func firstReports(messages []received) []received {
	var out []received
	for _, m := range messages {
		if len(m.usages) == 1 && m.usages[0].first() {
			out = append(out, m)
		}
	}
	return out
}

func changedAssignments(res *Result) []Assignment {
	var out []Assignment
	for _, a := range res.Assignments {
		if a.Changed {
			out = append(out, a)
		}
	}
	return out
}

// expectOnly fails unless the counts are all admitted (admitted) or all denied, and some.
func expectOnly(t *testing.T, what string, c counts, admitted bool) {
	t.Helper()
	switch {
	case admitted && (c.Admitted == 0 || c.Denied != 0):
		t.Errorf("%s: want only admitted requests, got %+v", what, c)
	case !admitted && (c.Denied == 0 || c.Admitted != 0):
		t.Errorf("%s: want only denied requests, got %+v", what, c)
	}
}
