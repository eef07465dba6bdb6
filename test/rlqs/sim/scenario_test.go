package main

import (
	"strconv"
	"strings"
	"testing"
)

func TestScenarioErrors(t *testing.T) {
	t.Parallel()
	valid := `"addr":"127.0.0.1:1","domain":"d","durationMs":1000,"windowMs":100,"reportingIntervalMs":100`
	client := `{"name":"a","buckets":[{"k":"v"}],"rps":10}`
	cases := map[string]struct{ json, want string }{
		"not JSON":      {`{`, "not valid JSON"},
		"unknown field": {`{` + valid + `,"clients":[` + client + `],"extra":1}`, `unknown field "extra"`},
		"two objects":   {`{` + valid + `,"clients":[` + client + `]} {}`, "one JSON object"},
		"no clients":    {`{` + valid + `,"clients":[]}`, "at least one client"},
		"no domain":     {`{"addr":"x:1","durationMs":1,"windowMs":1,"reportingIntervalMs":1,"clients":[` + client + `]}`, "domain is required"},
		"empty bucket":  {`{` + valid + `,"clients":[{"name":"a","buckets":[{}],"rps":1}]}`, "buckets[0] is empty"},
		"same bucket twice": {`{` + valid + `,"clients":[{"name":"a","buckets":[{"a":"1","b":"2"},{"b":"2","a":"1"}],"rps":1}]}`,
			"buckets[1] is the same BucketId as buckets[0]"},
		"no rps":         {`{` + valid + `,"clients":[{"name":"a","buckets":[{"k":"v"}]}]}`, "rps must be positive"},
		"stop too early": {`{` + valid + `,"clients":[{"name":"a","buckets":[{"k":"v"}],"rps":1,"startMs":5,"stopMs":5}]}`, "stopMs must be after startMs"},
		"both strategies": {`{` + valid + `,"noAssignment":{"blanket":"DENY_ALL","tokenBucket":{"maxTokens":1,"fillIntervalMs":1}},"clients":[` + client + `]}`,
			"noAssignment: needs exactly one"},
		"bad blanket": {`{` + valid + `,"noAssignment":{"blanket":"DENY"},"clients":[` + client + `]}`, `not "DENY"`},
		"reuse and fallback": {`{` + valid + `,"expiredAssignment":{"reuseLast":true,"fallback":{"blanket":"DENY_ALL"}},"clients":[` + client + `]}`,
			"exactly one of"},
		"bad semantics":   {`{` + valid + `,"semantics":"envoy","clients":[` + client + `]}`, `not "envoy"`},
		"duplicate names": {`{` + valid + `,"clients":[` + client + `,{"name":"a#1","buckets":[{"k":"v"}],"rps":1},{"name":"a","buckets":[{"k":"v"}],"rps":1,"count":2}]}`, `two clients are named "a#1"`},
	}
	for name, c := range cases {
		_, err := readScenario(strings.NewReader(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error with %q, got %v", name, c.want, err)
		}
	}
}

func TestCountExpandsClients(t *testing.T) {
	t.Parallel()
	sc, err := readScenario(strings.NewReader(`{"addr":"x:1","domain":"d","durationMs":1000,"windowMs":100,
		"reportingIntervalMs":100,"clients":[{"name":"a","buckets":[{"k":"v"}],"rps":1,"count":3,
		"startMs":100,"spreadMs":300,"stopMs":5000}]}`))
	if err != nil {
		t.Fatal(err)
	}
	plans, err := sc.expand()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range plans {
		got = append(got, p.name+"@"+p.start.String()+"-"+p.stop.String())
	}
	want := "a#0@100ms-1s a#1@200ms-1s a#2@300ms-1s"
	if strings.Join(got, " ") != want {
		t.Errorf("got %v, want %s", got, want)
	}
}

func TestWindowsAreEpochAligned(t *testing.T) {
	t.Parallel()
	ws := windows(1000, 500, 1200, 2300, false)
	var got []string
	for _, w := range ws {
		mark := "whole"
		if w.Partial {
			mark = "partial"
		}
		got = append(got, strconv.FormatInt(w.StartMs, 10)+":"+mark)
	}
	if want := "1000:partial 1500:whole 2000:partial"; strings.Join(got, " ") != want {
		t.Errorf("got %v, want %s", got, want)
	}
}
