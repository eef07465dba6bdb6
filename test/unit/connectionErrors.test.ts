import { describe, expect, it } from 'vitest';
import {
  explainConnectionError,
  selectRefused,
  type ConnectionFacts,
} from '../../src/store/connectionErrors.js';

// The words for each set-up mistake, from what the socket saw; the real servers' side of each is
// in test/integration/redisTlsErrors.test.ts and redisSelect.test.ts.

const facts = (overrides: Partial<ConnectionFacts> = {}): ConnectionFacts => ({
  tls: true,
  caCert: true,
  clientCert: true,
  address: '10.0.0.1:6379',
  connected: true,
  secure: false,
  received: false,
  ...overrides,
});

const error = (message: string, code?: string, reason?: string) =>
  Object.assign(new Error(message), { code, reason });

describe('connection errors that are set-up mistakes', () => {
  it('names a plain-text port behind rediss://, whether it answers nothing or garbage', () => {
    expect(explainConnectionError(error('connect ETIMEDOUT', 'ETIMEDOUT'), facts())).toBe(
      'TLS is on (rediss:// or REDIS_TLS=true), but the server at 10.0.0.1:6379 did not answer ' +
        'a TLS handshake: is it a plain-text port? use redis://',
    );
    const garbage = error(
      '…:wrong version number:…',
      'ERR_SSL_WRONG_VERSION_NUMBER',
      'wrong version number',
    );
    expect(explainConnectionError(garbage, facts())).toBe(
      'TLS is on (rediss:// or REDIS_TLS=true), but the server at 10.0.0.1:6379 did not answer ' +
        'the TLS handshake in TLS (wrong version number): is it a plain-text port? use redis://',
    );
  });

  it('leaves a timeout alone when no TCP connection was made', () => {
    const timeout = error('connect ETIMEDOUT', 'ETIMEDOUT');
    expect(explainConnectionError(timeout, facts({ connected: false }))).toBeUndefined();
    expect(explainConnectionError(timeout, facts({ tls: false }))).toBeUndefined();
  });

  it('names a TLS port behind redis://, closed or answered in TLS', () => {
    const plain = facts({ tls: false });
    expect(explainConnectionError(error('read ECONNRESET', 'ECONNRESET'), plain)).toBe(
      'the server at 10.0.0.1:6379 closed the connection before answering anything: is it a TLS ' +
        'port? use rediss://',
    );
    const reply = error('Protocol error, got "\\u0015" as reply type byte. Please report this.');
    expect(explainConnectionError(reply, plain)).toBe(
      'the server at 10.0.0.1:6379 answered in TLS: use rediss:// (or REDIS_TLS=true)',
    );
    // A reset after replies is an ordinary lost connection.
    const answered = facts({ tls: false, received: true });
    expect(
      explainConnectionError(error('read ECONNRESET', 'ECONNRESET'), answered),
    ).toBeUndefined();
  });

  it('names an untrusted server certificate, with or without REDIS_TLS_CACERT', () => {
    const untrusted = error(
      'self-signed certificate in certificate chain',
      'SELF_SIGNED_CERT_IN_CHAIN',
    );
    expect(explainConnectionError(untrusted, facts())).toMatch(
      /is not trusted \(self-signed certificate in certificate chain\): REDIS_TLS_CACERT must name the CA that signed it$/,
    );
    expect(explainConnectionError(untrusted, facts({ caCert: false }))).toMatch(
      /REDIS_TLS_CACERT is unset, so only the system's roots are trusted/,
    );
  });

  it('names a refused client certificate, by alert or by a close after the handshake', () => {
    const alert = error('…', 'ERR_SSL_TLSV1_ALERT_UNKNOWN_CA', 'tlsv1 alert unknown ca');
    expect(explainConnectionError(alert, facts({ secure: true }))).toBe(
      'TLS: the server at 10.0.0.1:6379 refused the client certificate (tlsv1 alert unknown ca): ' +
        "check REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY, and that the server's " +
        'tls-ca-cert-file signed it',
    );
    const reset = error('write ECONNRESET', 'ECONNRESET');
    expect(explainConnectionError(reset, facts({ secure: true, clientCert: false }))).toBe(
      'TLS: the server at 10.0.0.1:6379 asks for a client certificate (it closed the connection ' +
        'after the handshake): set REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY',
    );
  });

  it('names the database SELECT refused, and the grant an ACL user lacks', () => {
    expect(selectRefused(99, error('ERR DB index is out of range'))).toBe(
      'REDIS_URL: database 99 cannot be selected: ERR DB index is out of range',
    );
    const noperm = error("NOPERM User tollgate has no permissions to run the 'select' command");
    expect(selectRefused(2, noperm)).toBe(
      'REDIS_URL: database 2 cannot be selected: the ACL user lacks +select; grant +select or use database 0',
    );
  });
});
