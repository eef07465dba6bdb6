package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoyproxy/ratelimit/src/settings"
)

// The runner's own tests start this test binary as a fake tollgate, which does what
// TOLLGATE_SUITE_FAKE says, instead of running the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("TOLLGATE_SUITE_FAKE") {
	case "":
		os.Exit(m.Run())
	case "refuse":
		fmt.Fprintln(os.Stderr, "a line before")
		fmt.Fprintln(os.Stderr, "tollgate: GRPC_CLIENT_TLS_CACERT: a made-up refusal")
		os.Exit(3)
	case "exit":
		os.Exit(0)
	case "serve", "fail-drain":
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM)
		fmt.Println("listening")
		<-stop
		if os.Getenv("TOLLGATE_SUITE_FAKE") == "fail-drain" {
			fmt.Fprintln(os.Stderr, "stopping failed; exiting")
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// fake prepares a runner whose tollgate is this binary playing `role`, logging into a new folder.
func fake(t *testing.T, role string) (Runner, string) {
	t.Chdir(t.TempDir())
	self, err := json.Marshal([]string{os.Args[0]})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TOLLGATE_COMMAND", string(self))
	t.Setenv("TOLLGATE_SUITE_FAKE", role)
	t.Setenv("TOLLGATE_SUITE_LOG", filepath.Join(t.TempDir(), "runs.jsonl"))
	return newRunner(settings.Settings{}), os.Getenv("TOLLGATE_SUITE_LOG")
}

// start runs r.Run as the reference's startTestRunner does, and gives what it panicked with.
func start(r Runner) <-chan any {
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		r.Run()
	}()
	return done
}

func endings(t *testing.T, log string) []Ending {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("the suite log: %v", err)
	}
	var out []Ending
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var end Ending
		if err := json.Unmarshal([]byte(line), &end); err != nil {
			t.Fatalf("suite log line %q: %v", line, err)
		}
		out = append(out, end)
	}
	return out
}

func waitFor(t *testing.T, done <-chan any) any {
	t.Helper()
	select {
	case value := <-done:
		return value
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s")
		return nil
	}
}

func TestATollgateThatExitsBeforeStopFailsTheTest(t *testing.T) {
	for _, c := range []struct{ role, exit, stderr string }{
		{"refuse", "exit status 3", "tollgate: GRPC_CLIENT_TLS_CACERT: a made-up refusal"},
		{"exit", "exit status 0", ""},
	} {
		t.Run(c.role, func(t *testing.T) {
			r, log := fake(t, c.role)
			panicked := waitFor(t, start(r))
			r.Stop()

			message, _ := panicked.(string)
			want := "tollgate exited before the runner stopped it (" + c.exit + ", after "
			if !strings.Contains(message, want) {
				t.Fatalf("Run panicked with %v; want it to contain %q", panicked, want)
			}
			if c.stderr != "" && !strings.HasSuffix(message, "its last stderr lines:\na line before\n"+c.stderr) {
				t.Errorf("the panic does not end with tollgate's stderr lines: %q", message)
			}
			ends := endings(t, log)
			if len(ends) != 1 || !ends[0].Early || ends[0].Exit != c.exit || ends[0].StopMs != 0 {
				t.Fatalf("suite log: %+v; want one early run that ended with %s", ends, c.exit)
			}
			if c.stderr != "" && ends[0].Stderr[len(ends[0].Stderr)-1] != c.stderr {
				t.Errorf("suite log's stderr lines: %q; want the last to be %q", ends[0].Stderr, c.stderr)
			}
			if ends[0].Fault() == "" {
				t.Error("an early exit is no fault")
			}
		})
	}
}

// served waits until the fake tollgate has said it listens, in its log in the test's folder.
func served(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		logs, _ := filepath.Glob("tollgate-*.log")
		for _, name := range logs {
			if data, _ := os.ReadFile(name); strings.Contains(string(data), "listening") {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the fake tollgate did not listen within 30 s")
}

func TestATollgateStoppedByTheRunner(t *testing.T) {
	for _, c := range []struct{ role, exit, fault string }{
		{"serve", "exit status 0", ""},
		{"fail-drain", "exit status 1", "tollgate ended with exit status 1 after SIGTERM, where a drain exits 0"},
	} {
		t.Run(c.role, func(t *testing.T) {
			r, log := fake(t, c.role)
			done := start(r)
			served(t)
			r.Stop()
			if panicked := waitFor(t, done); panicked != nil {
				t.Fatalf("Run panicked after Stop: %v", panicked)
			}
			ends := endings(t, log)
			if len(ends) != 1 || ends[0].Early || ends[0].Exit != c.exit || ends[0].Fault() != c.fault {
				t.Fatalf("suite log: %+v; want one stopped run that ended with %s", ends, c.exit)
			}
			if c.fault != "" && (len(ends[0].Stderr) == 0 || ends[0].Stderr[0] != "stopping failed; exiting") {
				t.Errorf("a failed drain's stderr lines: %q", ends[0].Stderr)
			}
		})
	}
}

func TestTailKeepsTheLastLinesCut(t *testing.T) {
	tail := newTail(2, 5)
	fmt.Fprint(tail, "one\ntwo\nthree-and-more\nfo")
	fmt.Fprint(tail, "ur")
	if got := strings.Join(tail.lines(), "|"); got != "three|four" {
		t.Errorf("lines: %q; want three|four", got)
	}
}
