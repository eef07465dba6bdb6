package runner

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/test/common"
)

// The domain of the calls that mark how far tollgate's stats have been read. No rules file names
// it, so each call adds one to its domain_not_found counter and touches no other stat.
const probeDomain = "tollgate_suite_probe"

// The reference's local-cache gauges, which tollgate sends at every flush after the counters.
var localCacheGauges = []string{
	"hitCount", "missCount", "lookupCount", "entryCount",
	"evacuateCount", "expiredCount", "overwriteCount", "averageAccessTime",
}

// Store holds the statsd lines tollgate has sent: counters summed, gauges at their last value.
//
// In the reference, a test reads its stats store in process, so a read sees every call that has
// returned. Here a read first makes a probe call and waits until the probe's counter arrives.
// tollgate counts a call's stats before it answers, and sends a flush's counters in order, then
// its gauges; so when the probe's line and the gauges after it have arrived, so has every stat of
// the calls before it.
type Store struct {
	port       int
	tags       string
	localCache bool
	grpcPort   int
	tls        bool

	listener net.Listener
	mu       sync.Mutex
	changed  *sync.Cond
	counters map[string]uint64
	gauges   map[string]uint64
	seq      map[string]uint64
	line     uint64
	probes   uint64
	conn     *grpc.ClientConn
}

func newStore(s settings.Settings) (*Store, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	store := &Store{
		port:       listener.Addr().(*net.TCPAddr).Port,
		tags:       serializeTags(s.ExtraTags),
		localCache: s.LocalCacheSizeInBytes > 0,
		grpcPort:   s.GrpcPort,
		tls:        s.GrpcServerUseTLS,
		listener:   listener,
		counters:   map[string]uint64{},
		gauges:     map[string]uint64{},
		seq:        map[string]uint64{},
	}
	store.changed = sync.NewCond(&store.mu)
	go store.accept()
	return store, nil
}

func (s *Store) accept() {
	for {
		conn, err := s.listener.Accept()
		if err != nil {
			return
		}
		go s.read(conn)
	}
}

func (s *Store) read(conn net.Conn) {
	defer conn.Close()
	lines := bufio.NewScanner(conn)
	lines.Buffer(make([]byte, 64*1024), 1024*1024)
	for lines.Scan() {
		s.record(lines.Text())
	}
}

// record takes one statsd line: `name:value|c` or `name:value|g`; timings are not kept.
func (s *Store) record(line string) {
	name, rest, ok := strings.Cut(line, ":")
	if !ok {
		return
	}
	text, kind, ok := strings.Cut(rest, "|")
	if !ok {
		return
	}
	value, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.line++
	switch kind {
	case "c":
		s.counters[name] += value
	case "g":
		s.gauges[name] = value
	default:
		return
	}
	s.seq[name] = s.line
	s.changed.Broadcast()
}

// sync returns once every stat of the calls that have returned has been read.
func (s *Store) sync() {
	if s.tls {
		panic("runner: stats cannot be read from a tollgate that serves gRPC over TLS")
	}
	s.mu.Lock()
	s.probes++
	want := s.probes
	s.mu.Unlock()

	conn, err := s.client()
	if err != nil {
		panic(fmt.Sprintf("runner: cannot reach tollgate to read its stats: %v", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx,
		common.NewRateLimitRequest(probeDomain, [][][2]string{{{"probe", "probe"}}}, 1))

	probe := fmt.Sprintf("ratelimit.service.rate_limit.%s.domain_not_found%s", probeDomain, s.tags)
	deadline := time.Now().Add(10 * time.Second)
	timer := time.AfterFunc(10*time.Second, func() {
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for !s.caughtUp(probe, want) {
		if time.Now().After(deadline) {
			panic(fmt.Sprintf("runner: tollgate's stats did not arrive within 10 s (probe %d of %d)",
				s.counters[probe], want))
		}
		s.changed.Wait()
	}
}

func (s *Store) caughtUp(probe string, want uint64) bool {
	if s.counters[probe] < want {
		return false
	}
	if !s.localCache {
		return true
	}
	for _, gauge := range localCacheGauges {
		if s.seq["ratelimit.localcache."+gauge+s.tags] <= s.seq[probe] {
			return false
		}
	}
	return true
}

func (s *Store) client() (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		return s.conn, nil
	}
	conn, err := grpc.NewClient(fmt.Sprintf("localhost:%d", s.grpcPort),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	s.conn = conn
	return conn, nil
}

func (s *Store) close() {
	_ = s.listener.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// Flush makes the stats of every call that has returned readable, as the store's Flush does.
func (s *Store) Flush() { s.sync() }

// Counter is one counter of the store.
type Counter struct {
	store *Store
	name  string
}

// Value is the counter's total so far.
func (c Counter) Value() uint64 {
	c.store.sync()
	c.store.mu.Lock()
	defer c.store.mu.Unlock()
	return c.store.counters[c.name]
}

// Gauge is one gauge of the store.
type Gauge struct {
	store *Store
	name  string
}

// Value is the gauge's last value. As in the reference's store, it changes at a flush.
func (g Gauge) Value() uint64 {
	g.store.mu.Lock()
	defer g.store.mu.Unlock()
	return g.store.gauges[g.name]
}

// NewCounter names a counter without tags.
func (s *Store) NewCounter(name string) Counter { return Counter{s, name} }

// NewCounterWithTags names a counter with these tags.
func (s *Store) NewCounterWithTags(name string, tags map[string]string) Counter {
	return Counter{s, name + serializeTags(tags)}
}

// NewGauge names a gauge.
func (s *Store) NewGauge(name string) Gauge { return Gauge{s, name} }

// serializeTags is the reference's stats library's statsd form of tags: `.__key=value`, by key.
func serializeTags(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for key := range tags {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var out strings.Builder
	for _, key := range keys {
		fmt.Fprintf(&out, ".__%s=%s", key, tags[key])
	}
	return out.String()
}
