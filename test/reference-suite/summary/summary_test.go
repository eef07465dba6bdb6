package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tollgate/test/reference-suite/runner"
)

// A package of tests shaped as the reference's are: TestOwnBody checks on its own testing.T
// inside a subtest, as TestReloadGRPCServerCerts does, so the parent fails and every subtest
// passes.
const fixture = `package fixture

import "testing"

func TestOwnBody(t *testing.T) {
	t.Run("First", func(*testing.T) {})
	t.Run("Second", func(*testing.T) { t.Errorf("checked on the parent") })
	t.Run("Third", func(*testing.T) {})
}

func TestSubtestFails(t *testing.T) {
	t.Run("Good", func(*testing.T) {})
	t.Run("Bad", func(t *testing.T) { t.Errorf("checked on the subtest") })
}

func TestPasses(t *testing.T) {
	t.Log("a note")
	t.Run("Only", func(*testing.T) {})
}

func TestLeaf(t *testing.T) {}
`

// goTestJSON runs go test -json on the fixture, as the suite runs the reference's tests.
func goTestJSON(t *testing.T) ([]byte, int) {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":          "module fixture\n\ngo 1.26.0\n",
		"fixture_test.go": fixture,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", ".")
	cmd.Dir = dir
	out, err := cmd.Output()
	if _, failed := err.(*exec.ExitError); err != nil && !failed {
		t.Fatalf("go test: %v", err)
	}
	return out, cmd.ProcessState.ExitCode()
}

func TestAParentWhoseOwnChecksFailedIsCountedAndNamed(t *testing.T) {
	events, exit := goTestJSON(t)
	s, err := summarize(bytes.NewReader(events), strings.NewReader(""), exit)
	if err != nil {
		t.Fatal(err)
	}
	// TestSubtestFails failed only through its subtest, which counts instead; TestPasses passed.
	if want := []string{"TestOwnBody", "TestSubtestFails/Bad"}; !slices.Equal(s.Failing, want) {
		t.Errorf("failing: %q; want %q", s.Failing, want)
	}
	if s.Passed != 6 || s.Failed != 2 || s.OK {
		t.Errorf("passed %d, failed %d, ok %v; want 6, 2, false", s.Passed, s.Failed, s.OK)
	}
	text := strings.Join(s.Lines, "\n")
	for _, want := range []string{
		"FAIL TestOwnBody (",
		"s): its own checks, beside its subtests\n    fixture_test.go:7: checked on the parent",
		"6 of 8 of the reference's integration tests pass",
		"failed: TestOwnBody, TestSubtestFails/Bad",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the summary lacks %q:\n%s", want, text)
		}
	}
}

// Events of a run of two tests, each 10 s long, in which both passed.
func twoPassingTests(start time.Time) string {
	var lines []string
	for i, name := range []string{"Test_mTLS", "TestReloadGRPCServerCerts"} {
		ran := start.Add(time.Duration(i) * 10 * time.Second)
		for _, e := range []event{
			{Time: ran, Action: "run", Test: name},
			{Time: ran.Add(10 * time.Second), Action: "pass", Test: name, Elapsed: 10},
		} {
			line, _ := json.Marshal(e)
			lines = append(lines, string(line))
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

func suiteLog(endings ...runner.Ending) string {
	var out strings.Builder
	for _, end := range endings {
		line, _ := json.Marshal(end)
		out.Write(append(line, '\n'))
	}
	return out.String()
}

func TestATollgateThatExitedEarlyFailsTheTestItRanIn(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stopped := runner.Ending{Started: start.Add(time.Second), Exit: "exit status 0", StopMs: 40}
	early := runner.Ending{
		Started: start.Add(11 * time.Second),
		Exit:    "exit status 3",
		Early:   true,
		RanMs:   300,
		Stderr:  []string{"tollgate: a made-up refusal"},
		Log:     "tollgate-1.log",
	}
	s, err := summarize(strings.NewReader(twoPassingTests(start)), strings.NewReader(suiteLog(stopped, early)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Failing, []string{"TestReloadGRPCServerCerts"}) || s.Passed != 1 || s.OK {
		t.Errorf("failing %q, passed %d, ok %v; want TestReloadGRPCServerCerts, 1, false", s.Failing, s.Passed, s.OK)
	}
	text := strings.Join(s.Lines, "\n")
	for _, want := range []string{
		"FAIL TestReloadGRPCServerCerts (10s)\n" +
			"     tollgate exited before the runner stopped it (exit status 3, after 300 ms)\n" +
			"     | tollgate: a made-up refusal\n" +
			"     (its whole output: tollgate-1.log)",
		"1 tollgate runs stopped, the slowest in 40 ms after SIGTERM; 1 exited before they were stopped",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the summary lacks %q:\n%s", want, text)
		}
	}

	clean, err := summarize(strings.NewReader(twoPassingTests(start)), strings.NewReader(suiteLog(stopped)), 0)
	if err != nil || !clean.OK || clean.Passed != 2 {
		t.Errorf("a clean run: %+v, %v; want 2 passed and ok", clean, err)
	}
}
