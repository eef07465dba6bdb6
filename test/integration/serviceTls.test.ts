import { readFileSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRateLimitClient } from '@tollgate/client';
import { makeCerts, type TestCerts } from '../support/certs.js';
import { callCheck, d, startTollgate, type Tollgate } from '../support/tollgate.js';

// The running service with the reference's TLS settings: mutual TLS refuses a client without a
// certificate and serves one that has a certificate signed by GRPC_CLIENT_TLS_CACERT, and the
// plain HTTP port does not let anyone spend the quotas that only certified callers may.

let certs: TestCerts;
let tollgate: Tollgate;
const RULES =
  'domain: tls\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n';
const mutualTls = () => ({
  GRPC_SERVER_USE_TLS: 'true',
  GRPC_SERVER_TLS_CERT: certs.server.cert,
  GRPC_SERVER_TLS_KEY: certs.server.key,
  GRPC_CLIENT_TLS_CACERT: certs.ca,
});
const certified = () =>
  grpc.credentials.createSsl(
    readFileSync(certs.ca),
    readFileSync(certs.client.key),
    readFileSync(certs.client.cert),
  );
beforeAll(async () => {
  certs = makeCerts();
  tollgate = await startTollgate({
    rules: RULES,
    env: mutualTls(),
    clientCredentials: certified(),
  });
});
afterAll(() => tollgate?.stop());

/** POST /json with the check, as anyone on the network could send it. */
async function postJson(t: Tollgate, value = 'v'): Promise<[number, string]> {
  const response = await fetch(`${t.httpUrl}/json`, {
    method: 'POST',
    body: JSON.stringify({ domain: 'tls', descriptors: [{ entries: [{ key: 'k', value }] }] }),
  });
  return [response.status, await response.text()];
}

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

describe('POST /json beside mutual TLS', () => {
  it('refuses checks with 403, saying why, and spends nothing', async () => {
    const [status, body] = await postJson(tollgate);
    expect(status).toBe(403);
    expect(body).toBe(
      'POST /json is off while gRPC requires client certificates (GRPC_CLIENT_TLS_CACERT), ' +
        'which this plain HTTP port cannot ask for; HTTP_JSON=on serves it anyway',
    );
    for (let i = 0; i < 10; i++) expect((await postJson(tollgate, 'quota'))[0]).toBe(403);
    // The certified caller's quota is untouched by the refused attempts.
    const response = await tollgate.check({ domain: 'tls', descriptors: [d('k', 'quota')] });
    expect(response.statuses?.[0]?.limit_remaining).toBe(4);
  });

  it('serves checks with HTTP_JSON=on, as the operator chose', async () => {
    const open = await startTollgate({
      rules: RULES,
      env: { ...mutualTls(), HTTP_JSON: 'on' },
      clientCredentials: certified(),
    });
    try {
      const [status, body] = await postJson(open);
      expect(status).toBe(200);
      expect(JSON.parse(body).overallCode).toBe('OK');
    } finally {
      await open.stop();
    }
  });

  it('is off with HTTP_JSON=off, TLS or not', async () => {
    const closed = await startTollgate({ rules: RULES, env: { HTTP_JSON: 'off' } });
    try {
      expect(await postJson(closed)).toEqual([403, 'POST /json is off (HTTP_JSON=off)']);
      const health = await fetch(`${closed.httpUrl}/healthcheck`);
      expect(health.status).toBe(200);
    } finally {
      await closed.stop();
    }
  });
});
