// A hostile xDS management server, in a process of its own so that its work does not slow the
// test's own callers: on every ADS stream it sends valid RateLimitConfig updates, a new version
// of one domain's rules each, at the rate given as its argument, without waiting for ACKs.
// Commands on standard input, one a line: `flood on`, `flood off`, `sent`, and `bomb`, which
// sends one update of 4 MB whose descriptor metadata is a million nested empty lists. Events on
// standard output, one JSON object a line: listening, ack, nack (with its message), sent.
import { Buffer } from 'node:buffer';
import { createInterface } from 'node:readline';
import { setInterval } from 'node:timers';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';
// The service's own proto setup, from its build (the tests build it before they run).
import { loaderOptions, protoDir } from '../../dist/core/protos.js';
import { RATE_LIMIT_CONFIG_TYPE as TYPE } from '../../dist/rules/xdsRules.js';

const perSecond = Number(process.argv[2] ?? 5000);

const definition = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', loaderOptions);
const root = new protobuf.Root();
root.resolvePath = (_origin, target) => `${protoDir}${target}`;
root.loadSync('ratelimit/config/ratelimit/v3/rls_conf.proto', { keepCase: true });
const Config = root.lookupType('ratelimit.config.ratelimit.v3.RateLimitConfig');

const emit = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
/** The limit of version n. */
const limitOf = (n) => 1000 + (n % 1000);
let count = 0;
let flooding = false;
const update = (n) => {
  const config = {
    name: 'api',
    domain: 'api',
    descriptors: [{ key: 'tenant', rate_limit: { unit: 2, requests_per_unit: limitOf(n) } }],
  };
  const value = Buffer.from(Config.encode(Config.fromObject(config)).finish());
  return {
    version_info: `v${n}`,
    type_url: TYPE,
    nonce: String(n),
    resources: [{ type_url: TYPE, value }],
  };
};

const streams = new Set();
const server = new grpc.Server();
server.addService(definition['envoy.service.discovery.v3.AggregatedDiscoveryService'], {
  StreamAggregatedResources: (call) => {
    streams.add(call);
    call.on('data', (request) => {
      if (!request.response_nonce) return;
      emit({
        event: request.error_detail ? 'nack' : 'ack',
        version: request.version_info ?? '',
        ...(request.error_detail ? { message: request.error_detail.message } : {}),
      });
    });
    call.on('error', () => streams.delete(call));
    call.on('end', () => {
      streams.delete(call);
      call.end();
    });
    call.write(update(count++));
  },
});
server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, port) => {
  if (error) throw error;
  emit({ event: 'listening', port });
});

// Every 10 ms, a hundredth of the second's updates, to every stream.
const perTick = Math.max(1, Math.round(perSecond / 100));
setInterval(() => {
  if (!flooding) return;
  for (const call of streams) for (let i = 0; i < perTick; i++) call.write(update(count++));
}, 10);

/** RateLimitConfig 'bomb': one descriptor whose metadata lists 1,000,000 empty lists. */
function bomb() {
  const field = (tag, bytes) =>
    Buffer.from(
      protobuf.Writer.create()
        .uint32((tag << 3) | 2)
        .bytes(bytes)
        .finish(),
    );
  const item = Buffer.from([0x0a, 0x02, 0x32, 0x00]); // ListValue.values: Value{list_value: {}}
  const lists = Buffer.alloc(item.length * 1_000_000);
  for (let at = 0; at < lists.length; at += item.length) item.copy(lists, at);
  const entry = Buffer.concat([field(1, Buffer.from('lists')), field(2, field(6, lists))]);
  const descriptor = Buffer.concat([field(1, Buffer.from('tenant')), field(8, field(1, entry))]);
  const value = Buffer.concat([
    field(1, Buffer.from('bomb')),
    field(2, Buffer.from('api')),
    field(3, descriptor),
  ]);
  const n = count++;
  return {
    version_info: `v${n}`,
    type_url: TYPE,
    nonce: String(n),
    resources: [{ type_url: TYPE, value }],
  };
}

createInterface({ input: process.stdin }).on('line', (line) => {
  if (line === 'bomb') for (const call of streams) call.write(bomb());
  if (line === 'flood on') flooding = true;
  else if (line === 'flood off') flooding = false;
  else if (line === 'sent')
    emit({ event: 'sent', count, last: `v${count - 1}`, limit: limitOf(count - 1) });
});
process.stdin.on('end', () => process.exit(0));
