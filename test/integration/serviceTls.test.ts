import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRateLimitClient } from '../../src/grpc/protos.js';
import { makeCerts, type TestCerts } from '../support/certs.js';
import { callCheck, d, startTollgate, type Tollgate } from '../support/tollgate.js';

// The running service with the reference's TLS settings: mutual TLS refuses a client without a
// certificate and serves one that has a certificate signed by GRPC_CLIENT_TLS_CACERT.

let certs: TestCerts;
let tollgate: Tollgate;
beforeAll(async () => {
  certs = makeCerts();
  const ca = readFileSync(certs.ca);
  tollgate = await startTollgate({
    rules:
      'domain: tls\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n',
    env: {
      GRPC_SERVER_USE_TLS: 'true',
      GRPC_SERVER_TLS_CERT: certs.server.cert,
      GRPC_SERVER_TLS_KEY: certs.server.key,
      GRPC_CLIENT_TLS_CACERT: certs.ca,
    },
    clientCredentials: grpc.credentials.createSsl(
      ca,
      readFileSync(certs.client.key),
      readFileSync(certs.client.cert),
    ),
  });
});
afterAll(() => tollgate?.stop());

const request = { domain: 'tls', descriptors: [d('k', 'v')] };

describe('mutual TLS in the running service', () => {
  it('serves a client with a certificate signed by the client CA', async () => {
    expect((await tollgate.check(request)).overall_code).toBe('OK');
  });

  it('refuses a client without a certificate', async () => {
    const anonymous = createRateLimitClient(
      tollgate.address,
      grpc.credentials.createSsl(readFileSync(certs.ca)),
    );
    await expect(callCheck(anonymous, request, 3_000)).rejects.toMatchObject({
      code: grpc.status.UNAVAILABLE,
    });
    anonymous.close();
  });
});
