// A hostile xDS management server, in a process of its own so that its work does not slow the
// test's own callers: on every ADS stream it sends valid RateLimitConfig updates, a new version
// of one domain's rules each, at the rate given as its argument, without waiting for ACKs.
// Commands on standard input, one a line: `flood on`, `flood off`, `sent`. Events on standard
// output, one JSON object a line: listening, ack, nack, sent.
import { Buffer } from 'node:buffer';
import { createInterface } from 'node:readline';
import { setInterval } from 'node:timers';
import { fileURLToPath, URL } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';

const protoDir = fileURLToPath(new URL('../../proto/', import.meta.url));
const TYPE = 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig';
const perSecond = Number(process.argv[2] ?? 5000);

const definition = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [protoDir],
});
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
      emit({ event: request.error_detail ? 'nack' : 'ack', version: request.version_info ?? '' });
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

createInterface({ input: process.stdin }).on('line', (line) => {
  if (line === 'flood on') flooding = true;
  else if (line === 'flood off') flooding = false;
  else if (line === 'sent')
    emit({ event: 'sent', count, last: `v${count - 1}`, limit: limitOf(count - 1) });
});
process.stdin.on('end', () => process.exit(0));
