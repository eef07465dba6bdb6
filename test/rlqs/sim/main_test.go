package main

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs the parallel tests all at once, not GOMAXPROCS at a time: they spend their time
// waiting on real time, not computing. The heavy ones (a fleet, thousands of buckets) are not
// parallel, so they run alone, before the others.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.parallel"); f != nil && f.Value.String() == f.DefValue {
		_ = f.Value.Set("32")
	}
	os.Exit(m.Run())
}
