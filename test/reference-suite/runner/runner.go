// Package runner stands in for envoyproxy/ratelimit's src/service_cmd/runner in the reference's own
// integration tests, so that those tests run unchanged against tollgate: NewRunner turns the
// reference's settings into the environment a user of the reference would set, Run starts
// tollgate with it (in COMPAT_MODE=reference), and GetStatsStore reads the statsd lines tollgate
// sends, under the reference's names, as the in-process stats store would have held them.
//
// TOLLGATE_COMMAND names the command that starts tollgate (for example `node dist/main.js`, or a
// JSON array of the program and its arguments), run from the test's folder; TOLLGATE_SUITE_LOG,
// when set, names a file that gets one JSON line per run (an Ending): its settings, when it
// started, how it ended and how long it took to stop. A tollgate that exits before the test stops
// it fails the test.
package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/envoyproxy/ratelimit/src/settings"
)

// How long Stop waits for tollgate to exit after SIGTERM before it kills it. tollgate exits within
// 2 s with no call open; a run that needs longer is reported in the suite log.
const stopDeadline = 10 * time.Second

// How many of tollgate's last stderr lines a failed run reports, and how much of each.
const (
	stderrLines     = 20
	stderrLineBytes = 400
)

// Runner is one tollgate process with the settings of one test.
type Runner struct{ *state }

type state struct {
	settings settings.Settings
	env      []string
	stats    *Store

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	started  time.Time
	stopping time.Time
	killed   bool
}

// The reference's tests count on a minute window not rolling over while they run: 20 calls of a
// 20-a-minute limit, then 5 over it, then the same key again. Run in process, the reference takes
// a fraction of a second for that; here each stat read costs a round trip and a flush, and a
// test takes about 3 s. So a runner is not made in the last seconds of a minute.
const latestSecondToStart = 45

// NewRunner prepares a tollgate for the settings, as the reference's runner prepares itself.
func NewRunner(s settings.Settings) Runner {
	if now := time.Now(); now.Second() > latestSecondToStart {
		time.Sleep(now.Truncate(time.Minute).Add(time.Minute).Sub(now))
	}
	return newRunner(s)
}

func newRunner(s settings.Settings) Runner {
	stats, err := newStore(s)
	if err != nil {
		panic(fmt.Sprintf("runner: cannot listen for statsd: %v", err))
	}
	// The settings the tests leave at the reference's defaults mean those defaults. One of them
	// differs in tollgate and matters here: REDIS_TIMEOUT, 10s in the reference and 15ms in
	// tollgate, whose first script calls after start-up can take longer than that on a busy host.
	env := append(os.Environ(), "REDIS_TIMEOUT=10s")
	env = append(env, environment(s)...)
	env = append(env,
		"COMPAT_MODE=reference",
		// The reference's tests read its stats in process; here they arrive over statsd, flushed
		// often so that a read waits little.
		"USE_STATSD=true",
		"STATSD_HOST=127.0.0.1",
		"STATSD_PORT="+strconv.Itoa(stats.port),
		"STATSD_PROTOCOL=tcp",
		"STATS_FLUSH_INTERVAL=1ms",
	)
	return Runner{&state{settings: s, env: env, stats: stats, exited: make(chan struct{})}}
}

// Run starts tollgate and returns when it has exited. A tollgate that exits before Stop is called
// is a failure of the test, whatever its exit status: Run panics, naming the status and the last
// lines tollgate wrote to stderr, and the reference's startTestRunner turns the panic into the
// test's t.Fatalf. The suite log records it too, so the run fails even where no test is told.
func (r *Runner) Run() {
	command, err := tollgateCommand()
	if err != nil {
		panic("runner: " + err.Error())
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = r.env
	stderr := newTail(stderrLines, stderrLineBytes)
	logName, _ := filepath.Abs(fmt.Sprintf("tollgate-%d.log", time.Now().UnixNano()))
	logFile, err := os.Create(logName)
	if err == nil {
		cmd.Stdout = logFile
		cmd.Stderr = io.MultiWriter(logFile, stderr)
		defer logFile.Close()
	} else {
		logName = ""
		cmd.Stdout = os.Stderr
		cmd.Stderr = io.MultiWriter(os.Stderr, stderr)
	}
	r.mu.Lock()
	r.cmd = cmd
	r.started = time.Now()
	err = cmd.Start()
	r.mu.Unlock()
	if err != nil {
		close(r.exited)
		panic(fmt.Sprintf("runner: cannot start tollgate: %v", err))
	}
	waitErr := cmd.Wait()
	end := r.ending(waitErr, stderr.lines(), logName)
	r.report(end)
	close(r.exited)
	// Stop has not been called, so the test that started this tollgate is still running.
	if end.Early {
		panic("runner: " + end.Fault() + tailText(end.Stderr))
	}
}

// Stop sends SIGTERM and waits for tollgate to exit, as the reference's runner stops its servers.
func (r *Runner) Stop() {
	r.mu.Lock()
	cmd := r.cmd
	r.stopping = time.Now()
	r.mu.Unlock()
	defer r.stats.close()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(stopDeadline):
		r.mu.Lock()
		r.killed = true
		r.mu.Unlock()
		_ = cmd.Process.Kill()
		<-r.exited
	}
}

// Ending is how one tollgate run ended: a line of the suite log.
type Ending struct {
	Settings []string  `json:"settings"`
	Started  time.Time `json:"started"`
	// Exit is as Go's os/exec says it: "exit status 0", "exit status 3", "signal: killed".
	Exit string `json:"exit"`
	// Early: tollgate exited before Stop was called.
	Early bool `json:"early"`
	// RanMs is how long tollgate ran; StopMs how long it took to exit after SIGTERM.
	RanMs  int64 `json:"ranMs"`
	StopMs int64 `json:"stopMs"`
	Killed bool  `json:"killed"`
	// Stderr holds tollgate's last stderr lines when the run failed; Log names its whole output.
	Stderr []string `json:"stderr,omitempty"`
	Log    string   `json:"log,omitempty"`
}

func (r *Runner) ending(waitErr error, stderr []string, log string) Ending {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	end := Ending{
		Settings: settingsSummary(r.env),
		Started:  r.started,
		Exit:     "exit status 0",
		Early:    r.stopping.IsZero(),
		RanMs:    now.Sub(r.started).Milliseconds(),
		Killed:   r.killed,
		Log:      log,
	}
	if waitErr != nil {
		end.Exit = waitErr.Error()
	}
	if !end.Early {
		end.StopMs = now.Sub(r.stopping).Milliseconds()
	}
	if end.Fault() != "" {
		end.Stderr = stderr
	}
	return end
}

// Fault says what went wrong in the run, or "" for a run that served until Stop and then exited 0
// within the deadline.
func (e Ending) Fault() string {
	switch {
	case e.Early:
		return fmt.Sprintf("tollgate exited before the runner stopped it (%s, after %d ms)", e.Exit, e.RanMs)
	case e.Killed:
		return fmt.Sprintf("tollgate did not exit within %s of SIGTERM and was killed", stopDeadline)
	case e.Exit != "exit status 0":
		return fmt.Sprintf("tollgate ended with %s after SIGTERM, where a drain exits 0", e.Exit)
	}
	return ""
}

func tailText(lines []string) string {
	if len(lines) == 0 {
		return "; it wrote nothing to stderr"
	}
	return "; its last stderr lines:\n" + strings.Join(lines, "\n")
}

func (r *Runner) report(end Ending) {
	path := os.Getenv("TOLLGATE_SUITE_LOG")
	if path == "" {
		return
	}
	line, _ := json.Marshal(end)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
}

// tollgateCommand is TOLLGATE_COMMAND: a JSON array of the program and its arguments, or words
// separated by spaces.
func tollgateCommand() ([]string, error) {
	value := strings.TrimSpace(os.Getenv("TOLLGATE_COMMAND"))
	var command []string
	if strings.HasPrefix(value, "[") {
		if err := json.Unmarshal([]byte(value), &command); err != nil {
			return nil, fmt.Errorf("TOLLGATE_COMMAND is not a JSON array of strings: %v", err)
		}
	} else {
		command = strings.Fields(value)
	}
	if len(command) == 0 {
		return nil, fmt.Errorf("TOLLGATE_COMMAND is not set")
	}
	return command, nil
}

// GetStatsStore gives the stats tollgate has sent, read as the reference's tests read its store.
func (r *Runner) GetStatsStore() *Store { return r.stats }

// environment gives the variables that a user of the reference sets to get these settings: every
// setting that differs from the reference's default, in the form the reference reads.
func environment(s settings.Settings) []string {
	var defaults settings.Settings
	if err := envconfig.Process("TOLLGATE_SUITE_UNSET_", &defaults); err != nil {
		panic(err)
	}
	var env []string
	got, base := reflect.ValueOf(s), reflect.ValueOf(defaults)
	for i := 0; i < got.NumField(); i++ {
		field := got.Type().Field(i)
		name := field.Tag.Get("envconfig")
		if name == "" || !field.IsExported() {
			continue
		}
		if reflect.DeepEqual(got.Field(i).Interface(), base.Field(i).Interface()) {
			continue
		}
		value, ok := format(got.Field(i))
		if !ok {
			panic(fmt.Sprintf("runner: setting %s has a type the runner cannot write: %s", name, field.Type))
		}
		env = append(env, name+"="+value)
	}
	return env
}

func format(v reflect.Value) (string, bool) {
	if d, ok := v.Interface().(time.Duration); ok {
		return d.String(), true
	}
	switch v.Kind() {
	case reflect.String:
		return v.String(), true
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10), true
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64), true
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			part, ok := format(v.Index(i))
			if !ok {
				return "", false
			}
			parts[i] = part
		}
		return strings.Join(parts, ","), true
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		for _, key := range v.MapKeys() {
			keys = append(keys, fmt.Sprintf("%v:%v", key.Interface(), v.MapIndex(key).Interface()))
		}
		sort.Strings(keys)
		return strings.Join(keys, ","), true
	}
	return "", false
}

// settingsSummary is the environment this runner added, without credentials.
func settingsSummary(env []string) []string {
	own := env[len(os.Environ()):]
	out := make([]string, 0, len(own))
	for _, pair := range own {
		name, _, _ := strings.Cut(pair, "=")
		if strings.Contains(name, "AUTH") || strings.Contains(name, "PASSWORD") {
			pair = name + "=***"
		}
		out = append(out, pair)
	}
	return out
}
