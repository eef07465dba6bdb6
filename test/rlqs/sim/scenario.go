package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Scenario is the one JSON object read from standard input. Times are milliseconds; startMs and
// stopMs are offsets from the simulation's start.
type Scenario struct {
	Addr                string        `json:"addr"`
	Domain              string        `json:"domain"`
	DurationMs          int64         `json:"durationMs"`
	WindowMs            int64         `json:"windowMs"`
	ReportingIntervalMs int64         `json:"reportingIntervalMs"`
	NoAssignment        *StrategySpec `json:"noAssignment"`
	ExpiredAssignment   *ExpiredSpec  `json:"expiredAssignment"`
	Semantics           string        `json:"semantics"`
	PerClient           *bool         `json:"perClient"`
	ListUnchanged       bool          `json:"listUnchanged"`
	AssignmentLimit     int           `json:"assignmentLimit"`
	Seed                uint64        `json:"seed"`
	Clients             []ClientSpec  `json:"clients"`
}

// StrategySpec is a RateLimitStrategy of the filter's configuration: exactly one of the two.
type StrategySpec struct {
	Blanket     string           `json:"blanket"`
	TokenBucket *TokenBucketSpec `json:"tokenBucket"`
}

// TokenBucketSpec is envoy.type.v3.TokenBucket; tokensPerFill defaults to 1, as the proto says.
type TokenBucketSpec struct {
	MaxTokens      uint32  `json:"maxTokens"`
	TokensPerFill  *uint32 `json:"tokensPerFill"`
	FillIntervalMs int64   `json:"fillIntervalMs"`
}

// ExpiredSpec is the filter's expired_assignment_behavior: reuseLast or fallback, and the
// expired_assignment_behavior_timeout (0 when absent, as the proto says).
type ExpiredSpec struct {
	ReuseLast bool          `json:"reuseLast"`
	Fallback  *StrategySpec `json:"fallback"`
	TimeoutMs int64         `json:"timeoutMs"`
}

// ClientSpec is one simulated Envoy, or `count` of them named name#0..name#N-1.
type ClientSpec struct {
	Name    string              `json:"name"`
	Buckets []map[string]string `json:"buckets"`
	Rps     float64             `json:"rps"`
	Jitter  float64             `json:"jitter"`
	StartMs int64               `json:"startMs"`
	StopMs  *int64              `json:"stopMs"`
	Count   int                 `json:"count"`
	// SpreadMs spreads the starts of expanded clients evenly over [startMs, startMs+spreadMs).
	SpreadMs int64 `json:"spreadMs"`
}

// clientPlan is one expanded client: its own name, start and stop.
type clientPlan struct {
	name    string
	buckets []map[string]string
	rps     float64
	jitter  float64
	start   time.Duration
	stop    time.Duration
}

func readScenario(r io.Reader) (*Scenario, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading the scenario: %w", err)
	}
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.DisallowUnknownFields()
	var scenario Scenario
	if err := decoder.Decode(&scenario); err != nil {
		return nil, fmt.Errorf("the scenario is not valid JSON of the expected shape: %w", err)
	}
	if decoder.More() {
		return nil, errors.New("the scenario must be one JSON object")
	}
	if err := scenario.validate(); err != nil {
		return nil, err
	}
	return &scenario, nil
}

func (s *Scenario) validate() error {
	switch {
	case s.Addr == "":
		return errors.New("addr is required")
	case s.Domain == "":
		return errors.New("domain is required")
	case s.DurationMs <= 0:
		return errors.New("durationMs must be positive")
	case s.WindowMs <= 0:
		return errors.New("windowMs must be positive")
	case s.ReportingIntervalMs <= 0:
		return errors.New("reportingIntervalMs must be positive")
	case len(s.Clients) == 0:
		return errors.New("clients must name at least one client")
	case s.AssignmentLimit < 0:
		return errors.New("assignmentLimit must not be negative")
	}
	if _, ok := semanticsByName[s.semanticsName()]; !ok {
		return fmt.Errorf("semantics must be %q or %q, not %q", semanticsProto, semanticsEnvoyCode, s.Semantics)
	}
	if s.NoAssignment != nil {
		if err := s.NoAssignment.validate(); err != nil {
			return fmt.Errorf("noAssignment: %w", err)
		}
	}
	if e := s.ExpiredAssignment; e != nil {
		if e.ReuseLast == (e.Fallback != nil) {
			return errors.New(`expiredAssignment needs exactly one of "reuseLast": true and "fallback"`)
		}
		if e.Fallback != nil {
			if err := e.Fallback.validate(); err != nil {
				return fmt.Errorf("expiredAssignment.fallback: %w", err)
			}
		}
		if e.TimeoutMs < 0 {
			return errors.New("expiredAssignment.timeoutMs must not be negative")
		}
	}
	for i, c := range s.Clients {
		if err := c.validate(s.DurationMs); err != nil {
			return fmt.Errorf("clients[%d]: %w", i, err)
		}
	}
	_, err := s.expand()
	return err
}

func (s *Scenario) semanticsName() string {
	if s.Semantics == "" {
		return semanticsProto
	}
	return s.Semantics
}

func (s *Scenario) perClient() bool { return s.PerClient == nil || *s.PerClient }

// defaultAssignmentLimit keeps a fleet's result small; the counts cover what is not listed.
const defaultAssignmentLimit = 1000

func (s *Scenario) assignmentLimit() int {
	if s.AssignmentLimit == 0 {
		return defaultAssignmentLimit
	}
	return s.AssignmentLimit
}

func (sp *StrategySpec) validate() error {
	if (sp.Blanket != "") == (sp.TokenBucket != nil) {
		return errors.New(`needs exactly one of "blanket" and "tokenBucket"`)
	}
	if sp.Blanket != "" && sp.Blanket != "ALLOW_ALL" && sp.Blanket != "DENY_ALL" {
		return fmt.Errorf(`blanket must be "ALLOW_ALL" or "DENY_ALL", not %q`, sp.Blanket)
	}
	if sp.TokenBucket != nil && sp.TokenBucket.FillIntervalMs <= 0 {
		return errors.New("tokenBucket.fillIntervalMs must be positive")
	}
	return nil
}

func (c *ClientSpec) validate(durationMs int64) error {
	switch {
	case c.Name == "":
		return errors.New("name is required")
	case len(c.Buckets) == 0:
		return errors.New("buckets must hold at least one bucket")
	case c.Rps <= 0:
		return errors.New("rps must be positive")
	case c.Jitter < 0 || c.Jitter > 1:
		return errors.New("jitter must be between 0 and 1")
	case c.Count < 0:
		return errors.New("count must not be negative")
	case c.StartMs < 0 || c.SpreadMs < 0:
		return errors.New("startMs and spreadMs must not be negative")
	case c.StopMs != nil && *c.StopMs <= c.StartMs:
		return errors.New("stopMs must be after startMs")
	}
	seen := map[string]int{}
	for i, b := range c.Buckets {
		if len(b) == 0 {
			return fmt.Errorf("buckets[%d] is empty: a BucketId needs at least one key", i)
		}
		// Responses name buckets by their BucketId: two alike would be one bucket.
		if j, dup := seen[bucketKey(b)]; dup {
			return fmt.Errorf("buckets[%d] is the same BucketId as buckets[%d]", i, j)
		}
		seen[bucketKey(b)] = i
	}
	return nil
}

// expand gives every client its own name, start and stop: an entry with count N becomes
// name#0..name#N-1. Names must come out unique, since results are keyed by them.
func (s *Scenario) expand() ([]clientPlan, error) {
	duration := time.Duration(s.DurationMs) * time.Millisecond
	var out []clientPlan
	seen := map[string]bool{}
	for _, spec := range s.Clients {
		count := max(spec.Count, 1)
		stop := duration
		if spec.StopMs != nil {
			stop = min(stop, time.Duration(*spec.StopMs)*time.Millisecond)
		}
		for i := range count {
			name := spec.Name
			if count > 1 {
				name = fmt.Sprintf("%s#%d", spec.Name, i)
			}
			if seen[name] {
				return nil, fmt.Errorf("two clients are named %q", name)
			}
			seen[name] = true
			start := time.Duration(spec.StartMs)*time.Millisecond +
				time.Duration(spec.SpreadMs)*time.Millisecond*time.Duration(i)/time.Duration(count)
			out = append(out, clientPlan{
				name: name, buckets: spec.Buckets, rps: spec.Rps, jitter: spec.Jitter,
				start: start, stop: stop,
			})
		}
	}
	return out, nil
}
