// Command rlqs-sim plays a fleet of Envoys against a Rate Limit Quota Service: each simulated
// Envoy runs the client side of Envoy's rate_limit_quota HTTP filter over its own
// StreamRateLimitQuotas stream, making requests at its own rate into its buckets, reporting their
// usage and enforcing the assignments it gets back.
//
// It reads one scenario (a JSON object) from standard input, runs it in real time, and writes one
// result (a JSON object) to standard output; see Scenario and Result. It exits 2 for a scenario it
// cannot take, 1 when it cannot reach the server at all, and 0 otherwise, whatever the server did.
//
// Where the API's comments and Envoy's filter code disagree, the scenario's "semantics" chooses:
// see semantics.go.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	scenario, err := readScenario(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rlqs-sim: %v\n", err)
		os.Exit(2)
	}
	// SIGINT or SIGTERM ends the run early; what was measured until then is still written.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	result, err := run(ctx, scenario)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rlqs-sim: %v\n", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(result); err != nil {
		fmt.Fprintf(os.Stderr, "rlqs-sim: writing the result: %v\n", err)
		os.Exit(1)
	}
}
