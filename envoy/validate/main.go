// Command validate checks Envoy bootstrap files against Envoy's published v3 API: the protobuf
// schema (unknown fields, wrong types, bad enum values, unknown @types) and the
// protoc-gen-validate rules that Envoy enforces when it loads a config (required fields, ranges),
// and one rule of Envoy's behaviour: where a rate limit's hits_addend takes effect.
//
// Usage: validate FILE.yaml... It prints "OK: FILE" or every fault it finds, each named by its
// path in the YAML; exits 0 when every file is valid, 1 when one is not, 2 on a usage or read error.
package main

import (
	"fmt"
	"os"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// Each typed_config is a google.protobuf.Any, which protojson can read only when its message
	// type is registered, that is when its Go package is linked in: first the extensions the
	// samples in envoy/ use, then those an edit is most likely to reach for. A real Envoy type
	// missing here is reported as "unable to resolve": add its package below.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	// The rate_limit_quota filter's matchers: HttpRequestHeaderMatchInput, which also builds
	// bucket_id_builder's custom_value, and the xDS matcher's own inputs and CEL matcher.
	_ "github.com/cncf/xds/go/xds/type/matcher/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"

	// HTTP filters.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/basic_auth/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/buffer/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/compressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/decompressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/grpc_json_transcoder/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/grpc_stats/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/grpc_web/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/oauth2/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/set_metadata/v3"

	// Network and listener filters.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/proxy_protocol/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/connection_limit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/direct_response/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/local_ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"

	// Transport sockets, access logs, compression, upstreams and clusters.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/open_telemetry/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/brotli/compressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/compressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/gzip/decompressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/compression/zstd/compressor/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/proxy_protocol/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/tcp/v3"

	// Load balancing, DNS, matching, retries, overload and the typed-struct wrappers.
	_ "github.com/cncf/xds/go/udpa/type/v1"
	_ "github.com/cncf/xds/go/xds/type/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/least_request/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/random/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/ring_hash/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/network/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/network/dns_resolver/cares/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/network/dns_resolver/getaddrinfo/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/regex_engines/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: validate FILE.yaml...")
		os.Exit(2)
	}
	code := 0
	for _, file := range os.Args[1:] {
		data, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		faults := check(data)
		for _, fault := range faults {
			fmt.Printf("%s: %s\n", file, fault)
		}
		if len(faults) == 0 {
			fmt.Printf("OK: %s\n", file)
		} else {
			code = 1
		}
	}
	os.Exit(code)
}

// check returns every fault in one bootstrap file; none means that Envoy's API accepts it.
func check(data []byte) []string {
	doc, err := yaml.YAMLToJSON(data)
	if err != nil {
		return []string{err.Error()}
	}
	var bootstrap bootstrapv3.Bootstrap
	// protojson stops at its first fault, so a schema fault comes alone.
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(doc, &bootstrap); err != nil {
		return []string{locate(doc, err)}
	}
	var faults []string
	report := func(path, reason string) { faults = append(faults, path+": "+reason) }
	if err := bootstrap.ValidateAll(); err != nil {
		flatten(err, "", report)
	}
	walk(bootstrap.ProtoReflect(), "", false, report)
	return faults
}

// Envoy honours a rate limit's hits_addend and apply_on_stream_done only where the HTTP filter
// reads its rate limits from typed_per_filter_config (RateLimitPerRoute); elsewhere, a route's or a
// virtual host's rate_limits, it takes the descriptor without them, and a budget charged there
// would be charged one hit, on the request path. The API accepts both places alike.
const (
	perRouteType  = "envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute"
	rateLimitType = "envoy.config.route.v3.RateLimit"
)

func checkRateLimit(m protoreflect.Message, path string, report func(path, reason string)) {
	for _, field := range []protoreflect.Name{"hits_addend", "apply_on_stream_done"} {
		fd := m.Descriptor().Fields().ByName(field)
		if fd != nil && m.Has(fd) {
			report(path+"."+string(field), "Envoy honours it only in typed_per_filter_config "+
				"(RateLimitPerRoute.rate_limits), and ignores it here")
		}
	}
}

// walk finds every Any below m. The generated ValidateAll checks that an Any is there but never
// looks inside it, so each typed_config (a filter's domain, a proxy's cluster) would go unchecked:
// unpack it, validate it as a message of its own, and look for Anys inside it too.
func walk(m protoreflect.Message, path string, perRoute bool, report func(path, reason string)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inAny := func(path, reason string) { report(path, reason+" (in "+a.GetTypeUrl()+")") }
		inner, err := a.UnmarshalNew()
		if err != nil {
			inAny(path, err.Error())
			return
		}
		if v, ok := inner.(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				flatten(err, path, inAny)
			}
		}
		m = inner.ProtoReflect()
		if m.Descriptor().FullName() == perRouteType {
			perRoute = true
		}
	}
	if m.Descriptor().FullName() == rateLimitType && !perRoute {
		checkRateLimit(m, path, report)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := strings.TrimPrefix(path+"."+string(fd.Name()), ".")
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				walk(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", name, i), perRoute, report)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				walk(mv.Message(), fmt.Sprintf("%s[%s]", name, k.String()), perRoute, report)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			walk(v.Message(), name, perRoute, report)
		}
		return true
	})
}
