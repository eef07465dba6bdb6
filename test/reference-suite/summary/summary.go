package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"tollgate/test/reference-suite/runner"
)

// event is one line of `go test -json`.
type event struct {
	Time    time.Time
	Action  string
	Test    string
	Elapsed float64
	Output  string
}

type test struct {
	name     string
	action   string // pass, fail or skip; "" for a test that never ended (the binary died)
	seconds  float64
	output   strings.Builder
	ran      time.Time
	ended    time.Time
	parent   bool
	failures int // of its subtests
}

// Summary is what a run of the suite showed.
type Summary struct {
	Lines          []string
	Passed, Failed int
	// Failing names each failed test: a test without subtests, a parent whose own checks failed,
	// and a test in which tollgate exited before it was stopped.
	Failing []string
	OK      bool
}

// Framing lines of go test's output, which say nothing of what failed.
var framing = regexp.MustCompile(`^\s*$|^=== |^\s*--- (PASS|FAIL|SKIP)`)

// summarize reads the events of `go test -json` and the suite log of the tollgate runs, and
// `goExit`, the status go test exited with.
func summarize(events, runs io.Reader, goExit int) (Summary, error) {
	tests, order, packageOutput, err := readEvents(events)
	if err != nil {
		return Summary{}, err
	}
	// A subtest that never ended (the binary died in it) fails its parent as a failed one does.
	for _, t := range tests {
		if slash := strings.LastIndex(t.name, "/"); slash > 0 && t.action == "" {
			tests[t.name[:slash]].failures++
		}
	}
	endings, err := readRuns(runs)
	if err != nil {
		return Summary{}, err
	}
	var s Summary
	// Each run that failed, told under the test it ran in; that test fails.
	faults := map[string][]string{}
	stopped, slowest, killed, early := 0, int64(0), 0, 0
	for _, end := range endings {
		if end.Early {
			early++
		} else {
			stopped++
			slowest = max(slowest, end.StopMs)
		}
		if end.Killed {
			killed++
		}
		if fault := end.Fault(); fault != "" {
			name := testAt(tests, order, end.Started)
			faults[name] = append(faults[name], describe(end))
		}
	}
	for _, name := range order {
		t := tests[name]
		failed := t.action != "pass" && t.action != "skip"
		ownOutput := ownLines(t.output.String())
		if t.parent {
			// A parent's own checks failed if it failed with no failed subtest, or said why.
			if !(failed && (t.failures == 0 || len(ownOutput) > 0)) && faults[name] == nil {
				continue
			}
		}
		verdict := strings.ToUpper(t.action)
		if t.action == "" {
			verdict = "FAIL"
		}
		if faults[name] != nil {
			verdict, failed = "FAIL", true
		}
		s.Lines = append(s.Lines, fmt.Sprintf("%-4s %s (%gs)%s", verdict, name, t.seconds, note(t)))
		if failed {
			s.Failed++
			s.Failing = append(s.Failing, name)
			s.Lines = append(s.Lines, faults[name]...)
			s.Lines = append(s.Lines, excerpt(ownOutput)...)
		} else if t.action == "pass" {
			s.Passed++
		}
	}
	if faults[""] != nil {
		s.Failed++
		s.Failing = append(s.Failing, "(no test)")
		s.Lines = append(s.Lines, "FAIL a tollgate run outside any test")
		s.Lines = append(s.Lines, faults[""]...)
	}
	if goExit != 0 && strings.TrimSpace(packageOutput) != "" {
		lines := strings.Split(strings.TrimRight(packageOutput, "\n"), "\n")
		s.Lines = append(s.Lines, lines[max(0, len(lines)-60):]...)
	}
	last := fmt.Sprintf("\n%d of %d of the reference's integration tests pass against tollgate; "+
		"%d tollgate runs stopped, the slowest in %d ms after SIGTERM", s.Passed, s.Passed+s.Failed, stopped, slowest)
	if killed > 0 {
		last += fmt.Sprintf(", %d killed after 10 s", killed)
	}
	if early > 0 {
		last += fmt.Sprintf("; %d exited before they were stopped", early)
	}
	if len(s.Failing) > 0 {
		last += "\nfailed: " + strings.Join(s.Failing, ", ")
	}
	s.Lines = append(s.Lines, last)
	s.OK = goExit == 0 && s.Failed == 0 && s.Passed > 0 && len(faults) == 0
	return s, nil
}

func note(t *test) string {
	switch {
	case t.action == "":
		return ": it never ended"
	case t.parent:
		return ": its own checks, beside its subtests"
	}
	return ""
}

// excerpt keeps a long output's first and last 20 lines: a failure is told at either end, after
// the lines of the Redis servers a parent test starts.
func excerpt(lines []string) []string {
	if len(lines) <= 40 {
		return lines
	}
	out := append([]string{}, lines[:20]...)
	out = append(out, fmt.Sprintf("    ... %d lines ...", len(lines)-40))
	return append(out, lines[len(lines)-20:]...)
}

func ownLines(output string) []string {
	var out []string
	for _, line := range strings.Split(output, "\n") {
		if !framing.MatchString(line) {
			out = append(out, line)
		}
	}
	return out
}

func describe(end runner.Ending) string {
	text := "     " + end.Fault()
	for _, line := range end.Stderr {
		text += "\n     | " + line
	}
	if end.Log != "" {
		text += "\n     (its whole output: " + end.Log + ")"
	}
	return text
}

// testAt names the test that was running at `at`: the one that started last before it, among
// those that had not ended; "" if none.
func testAt(tests map[string]*test, order []string, at time.Time) string {
	name, latest := "", time.Time{}
	for _, candidate := range order {
		t := tests[candidate]
		if t.ran.After(at) || (!t.ended.IsZero() && t.ended.Before(at)) {
			continue
		}
		if t.ran.After(latest) || name == "" {
			name, latest = candidate, t.ran
		}
	}
	return name
}

func readEvents(r io.Reader) (map[string]*test, []string, string, error) {
	tests := map[string]*test{}
	var order []string
	var packageOutput strings.Builder
	get := func(name string) *test {
		if t, ok := tests[name]; ok {
			return t
		}
		t := &test{name: name}
		tests[name] = t
		order = append(order, name)
		return t
	}
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for scanner.Scan() {
		var e event
		if json.Unmarshal(scanner.Bytes(), &e) != nil {
			continue
		}
		if e.Test == "" {
			// A panic ends the whole binary, and its story is the package's output.
			if e.Action == "output" {
				packageOutput.WriteString(e.Output)
			}
			continue
		}
		t := get(e.Test)
		switch e.Action {
		case "run":
			t.ran = e.Time
			if slash := strings.LastIndex(e.Test, "/"); slash > 0 {
				get(e.Test[:slash]).parent = true
			}
		case "output":
			t.output.WriteString(e.Output)
		case "pass", "fail", "skip":
			t.action, t.seconds, t.ended = e.Action, e.Elapsed, e.Time
			if slash := strings.LastIndex(e.Test, "/"); slash > 0 && e.Action == "fail" {
				get(e.Test[:slash]).failures++
			}
		}
	}
	return tests, order, packageOutput.String(), scanner.Err()
}

func readRuns(r io.Reader) ([]runner.Ending, error) {
	var endings []runner.Ending
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for scanner.Scan() {
		if strings.TrimSpace(scanner.Text()) == "" {
			continue
		}
		var end runner.Ending
		if err := json.Unmarshal(scanner.Bytes(), &end); err != nil {
			return nil, fmt.Errorf("the suite log: %v", err)
		}
		endings = append(endings, end)
	}
	return endings, scanner.Err()
}
