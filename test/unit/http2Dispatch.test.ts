import type http2 from 'node:http2';
import { describe, it, expect } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { dispatchStreams } from '../../src/servers/grpc/http2Dispatch.js';

type Internals = { createHttp2Server(credentials: unknown): http2.Http2Server };
const insecure = grpc.ServerCredentials.createInsecure();

describe('the dispatch between the fast path and grpc-js', () => {
  it('takes the place of grpc-js own stream listener on every HTTP/2 server it creates', () => {
    const server = new grpc.Server();
    const configured: http2.Http2Server[] = [];
    dispatchStreams(server, {
      handlers: new Map([['/a/B', () => {}]]),
      configure: (created) => configured.push(created as http2.Http2Server),
    });
    const created = (server as unknown as Internals).createHttp2Server(insecure);
    expect(configured).toEqual([created]);
    expect(created.listenerCount('stream')).toBe(1);
    created.close();
  });

  it('stops start-up when grpc-js no longer has createHttp2Server', () => {
    const server = new grpc.Server();
    (server as unknown as { createHttp2Server?: unknown }).createHttp2Server = undefined;
    expect(() => dispatchStreams(server, { handlers: new Map() })).toThrow(
      /grpc-js has no createHttp2Server/,
    );
  });

  it("stops start-up when grpc-js's server has other than one stream listener", () => {
    const server = new grpc.Server();
    const internals = server as unknown as Internals;
    const create = internals.createHttp2Server.bind(server);
    internals.createHttp2Server = (credentials) => {
      const created = create(credentials);
      created.on('stream', () => {});
      return created;
    };
    dispatchStreams(server, { handlers: new Map() });
    expect(() => internals.createHttp2Server(insecure)).toThrow(
      /has 2 'stream' listeners, not 1: the fast path cannot route around it/,
    );
  });
});
