// Package runner stands in for envoyproxy/ratelimit's src/service_cmd/runner in the reference's own
// integration tests, so that those tests run unchanged against tollgate: NewRunner turns the
// reference's settings into the environment a user of the reference would set, Run starts
// tollgate with it (in COMPAT_MODE=reference), and GetStatsStore reads the statsd lines tollgate
// sends, under the reference's names, as the in-process stats store would have held them.
//
// TOLLGATE_COMMAND names the command that starts tollgate (for example `node dist/main.js`, run
// from the test's folder); TOLLGATE_SUITE_LOG, when set, names a file that gets one JSON line per
// run: its settings, how long it took to stop, and how it ended.
package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
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

// Runner is one tollgate process with the settings of one test.
type Runner struct{ *state }

type state struct {
	settings settings.Settings
	env      []string
	stats    *Store

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error
	started  time.Time
	stopping time.Time
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

// Run starts tollgate and returns when it has exited.
func (r *Runner) Run() {
	command := strings.Fields(os.Getenv("TOLLGATE_COMMAND"))
	if len(command) == 0 {
		panic("runner: TOLLGATE_COMMAND is not set")
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = r.env
	logFile, err := os.Create(fmt.Sprintf("tollgate-%d.log", time.Now().UnixNano()))
	if err == nil {
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		defer logFile.Close()
	} else {
		cmd.Stdout = os.Stderr
		cmd.Stderr = os.Stderr
	}
	r.mu.Lock()
	r.cmd = cmd
	r.started = time.Now()
	err = cmd.Start()
	r.mu.Unlock()
	if err != nil {
		r.exitErr = err
		close(r.exited)
		panic(fmt.Sprintf("runner: cannot start tollgate: %v", err))
	}
	r.exitErr = cmd.Wait()
	close(r.exited)
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
	killed := false
	select {
	case <-r.exited:
	case <-time.After(stopDeadline):
		killed = true
		_ = cmd.Process.Kill()
		<-r.exited
	}
	r.report(time.Since(r.stopping), killed)
}

func (r *Runner) report(stop time.Duration, killed bool) {
	path := os.Getenv("TOLLGATE_SUITE_LOG")
	if path == "" {
		return
	}
	exit := "0"
	if r.exitErr != nil {
		exit = r.exitErr.Error()
	}
	line, _ := json.Marshal(map[string]any{
		"settings": settingsSummary(r.env),
		"stopMs":   stop.Milliseconds(),
		"killed":   killed,
		"exit":     exit,
	})
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
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
