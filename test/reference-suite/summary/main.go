// Command summary prints what a run of the reference suite showed, from the events of
// `go test -json` and the suite log of the tollgate runs, and exits 0 only if every test passed
// and every tollgate served until its test stopped it, then exited 0.
//
// A test counts once: a test without subtests by its own result, and a parent only when its own
// checks failed (the reference's tests may check on the parent's testing.T inside a subtest, so
// the parent fails while every subtest passes). A tollgate run that failed (it exited before it
// was stopped, or did not exit 0 after SIGTERM) fails the test that was running when it started.
//
//	go run ./summary -events events.jsonl -runs runs.jsonl -exit STATUS
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
)

func main() {
	eventsPath := flag.String("events", "", "the output of go test -json")
	runsPath := flag.String("runs", "", "the suite log (TOLLGATE_SUITE_LOG); may be missing")
	goExit := flag.Int("exit", 0, "the status go test exited with")
	flag.Parse()
	events, err := os.Open(*eventsPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "summary: %v\n", err)
		os.Exit(2)
	}
	defer events.Close()
	runs, err := os.ReadFile(*runsPath)
	if err != nil && !os.IsNotExist(err) {
		fmt.Fprintf(os.Stderr, "summary: %v\n", err)
		os.Exit(2)
	}
	s, err := summarize(events, bytes.NewReader(runs), *goExit)
	if err != nil {
		fmt.Fprintf(os.Stderr, "summary: %v\n", err)
		os.Exit(2)
	}
	for _, line := range s.Lines {
		fmt.Println(line)
	}
	if !s.OK {
		os.Exit(1)
	}
}
