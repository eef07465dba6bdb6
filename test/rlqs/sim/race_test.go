//go:build race

package main

// raceEnabled: the race detector slows the process several times over.
const raceEnabled = true
