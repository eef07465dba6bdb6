package runner

import (
	"strings"
	"sync"
)

// tail keeps the last lines written to it, each cut to a length, so that a failed run can say
// what tollgate last wrote without holding all of it.
type tail struct {
	mu       sync.Mutex
	max      int
	maxBytes int
	kept     []string
	partial  strings.Builder
}

func newTail(lines, lineBytes int) *tail { return &tail{max: lines, maxBytes: lineBytes} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rest := string(p)
	for {
		line, after, found := strings.Cut(rest, "\n")
		if t.partial.Len() < t.maxBytes {
			t.partial.WriteString(line[:min(len(line), t.maxBytes-t.partial.Len())])
		}
		if !found {
			return len(p), nil
		}
		t.keep(t.partial.String())
		t.partial.Reset()
		rest = after
	}
}

func (t *tail) keep(line string) {
	t.kept = append(t.kept, line)
	if len(t.kept) > t.max {
		t.kept = t.kept[len(t.kept)-t.max:]
	}
}

// lines gives the kept lines, and the last one if it has no newline yet.
func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.kept...)
	if t.partial.Len() > 0 {
		out = append(out, t.partial.String())
	}
	if len(out) > t.max {
		out = out[len(out)-t.max:]
	}
	return out
}
