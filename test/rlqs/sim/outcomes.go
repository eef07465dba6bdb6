package main

import (
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxListedStreamErrors caps the stream errors a result lists, so that a fleet's outage does not
// fill it; the rest are counted.
const maxListedStreamErrors = 1_000

// counts is one client's requests in one window.
type counts struct {
	Admitted uint64 `json:"admitted"`
	Denied   uint64 `json:"denied"`
}

// clientOutcomes is what one client measured; the run merges them into the result.
type clientOutcomes struct {
	windows              []counts
	latencies            []time.Duration
	reconnects           int
	assignments          []Assignment
	assignmentCounts     AssignmentCounts
	streamErrors         []StreamError
	unlistedStreamErrors int64
}

func (o *clientOutcomes) count(window int, allowed bool) {
	for len(o.windows) <= window {
		o.windows = append(o.windows, counts{})
	}
	if allowed {
		o.windows[window].Admitted++
	} else {
		o.windows[window].Denied++
	}
}

// assignment counts an action, and lists it if it changed something or was ignored; the others
// (TTL extensions) only when listUnchanged is set. The run keeps the first `limit` of all.
func (o *clientOutcomes) assignment(entry Assignment, listUnchanged bool, limit int) {
	switch {
	case entry.Ignored:
		o.assignmentCounts.Ignored++
	case entry.Changed:
		o.assignmentCounts.Changed++
	default:
		o.assignmentCounts.Unchanged++
	}
	if (entry.Changed || entry.Ignored || listUnchanged) && len(o.assignments) < limit {
		o.assignments = append(o.assignments, entry)
	}
}

// streamEnded notes why a stream ended, unless the client closed it itself and it ended cleanly.
func (o *clientOutcomes) streamEnded(ev event, client string, closing bool) {
	clean := ev.err == nil || errors.Is(ev.err, io.EOF)
	if closing && clean {
		return
	}
	if len(o.streamErrors) >= maxListedStreamErrors {
		o.unlistedStreamErrors++
		return
	}
	code, message := "OK", "the server ended the stream"
	if !clean {
		st := status.Convert(ev.err)
		code, message = codeName(st.Code()), st.Message()
	}
	o.streamErrors = append(o.streamErrors, StreamError{
		AtMs: ev.at.UnixMilli(), Client: client, Code: code, Message: message, During: ev.during,
	})
}

// codeName is a gRPC status code as the gRPC specification spells it, e.g. UNAVAILABLE.
func codeName(code codes.Code) string {
	names := map[codes.Code]string{
		codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
		codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
		codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
		codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
		codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
		codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
		codes.Unauthenticated: "UNAUTHENTICATED",
	}
	if name, ok := names[code]; ok {
		return name
	}
	return code.String()
}
