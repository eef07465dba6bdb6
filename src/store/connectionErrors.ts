/**
 * Connection failures that are set-up mistakes, in words that name the mistake and what to check:
 * TLS against a plain-text port and the reverse, a server certificate REDIS_TLS_CACERT does not
 * trust, a client certificate the server refuses, and a database that cannot be selected. Node and
 * ioredis report these as a timeout, a reset connection or a protocol error, which say nothing
 * of TLS. Pure: the facts about the connection come from connectionWatch.ts.
 */

/** What was seen on the connection that failed. */
export interface ConnectionFacts {
  /** TLS is on (rediss:// or REDIS_TLS=true). */
  tls: boolean;
  /** A CA is configured (REDIS_TLS_CACERT); else the system's roots decide. */
  caCert: boolean;
  /** A client certificate is configured (REDIS_TLS_CLIENT_CERT). */
  clientCert: boolean;
  /** host:port of the server, or the Unix socket's path. */
  address: string;
  /** The TCP connection was made. */
  connected: boolean;
  /** The TLS handshake completed. */
  secure: boolean;
  /** The server sent something after the handshake. */
  received: boolean;
}

type Coded = Error & { code?: string; reason?: string };

const TLS_ON = 'TLS is on (rediss:// or REDIS_TLS=true)';

/** Certificate verification codes (OpenSSL's, as Node reports them) for an untrusted chain. */
const UNTRUSTED = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'CERT_CHAIN_TOO_LONG',
]);

/** The server's TLS alerts that refuse the client's certificate, or the lack of one. */
const CLIENT_CERT_ALERT =
  /ALERT_(BAD_CERTIFICATE|CERTIFICATE_REQUIRED|UNKNOWN_CA|CERTIFICATE_UNKNOWN|CERTIFICATE_REVOKED|CERTIFICATE_EXPIRED|UNSUPPORTED_CERTIFICATE|ACCESS_DENIED)$/;

/** The connection ended under the client: closed or reset by the server. */
const ENDED = new Set(['ECONNRESET', 'EPIPE']);

/** The text for a connection failure that is a TLS mistake, or undefined for any other. */
export function explainConnectionError(error: Coded, facts: ConnectionFacts): string | undefined {
  return facts.tls ? explainTls(error, facts) : explainPlain(error, facts);
}

function explainTls(error: Coded, facts: ConnectionFacts): string | undefined {
  const code = error.code ?? '';
  const at = `the server at ${facts.address}`;
  // OpenSSL's message carries its source file and line; its reason alone says what happened.
  const detail = error.reason ?? error.message;
  if (UNTRUSTED.has(code)) {
    const check = facts.caCert
      ? 'REDIS_TLS_CACERT must name the CA that signed it'
      : "REDIS_TLS_CACERT is unset, so only the system's roots are trusted: set it to the CA that signed it";
    return `TLS: the certificate of ${at} is not trusted (${error.message}): ${check}`;
  }
  if (code === 'CERT_HAS_EXPIRED' || code === 'CERT_NOT_YET_VALID') {
    return `TLS: the certificate of ${at} is not valid now (${error.message})`;
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    return `TLS: the certificate of ${at} is not for that name (${error.message}): connect by a name it holds, or set REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true`;
  }
  if (CLIENT_CERT_ALERT.test(code)) return clientCertRefused(at, facts, detail);
  if (!facts.secure && facts.connected) {
    if (code === 'ETIMEDOUT') {
      return `${TLS_ON}, but ${at} did not answer a TLS handshake: is it a plain-text port? use redis://`;
    }
    if (code.startsWith('ERR_SSL_') || ENDED.has(code)) {
      return `${TLS_ON}, but ${at} did not answer the TLS handshake in TLS (${detail}): is it a plain-text port? use redis://`;
    }
  }
  // TLS 1.3 completes the client's side of the handshake before the server checks its certificate.
  if (facts.secure && !facts.received && ENDED.has(code)) {
    return clientCertRefused(at, facts, `it closed the connection after the handshake`);
  }
  return undefined;
}

function clientCertRefused(at: string, facts: ConnectionFacts, detail: string): string {
  return facts.clientCert
    ? `TLS: ${at} refused the client certificate (${detail}): check REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY, and that the server's tls-ca-cert-file signed it`
    : `TLS: ${at} asks for a client certificate (${detail}): set REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY`;
}

function explainPlain(error: Coded, facts: ConnectionFacts): string | undefined {
  const at = `the server at ${facts.address}`;
  // A TLS record starts with 0x15 (an alert) or 0x16 (a handshake); no Redis reply does.
  if (/^Protocol error, got "\\u001[56]"/.test(error.message)) {
    return `${at} answered in TLS: use rediss:// (or REDIS_TLS=true)`;
  }
  if (facts.connected && !facts.received && ENDED.has(error.code ?? '')) {
    return `${at} closed the connection before answering anything: is it a TLS port? use rediss://`;
  }
  return undefined;
}

/** The database of REDIS_URL that SELECT refused, and what to do about it. */
export function selectRefused(db: number, error: Error): string {
  const reason = /^NOPERM\b/.test(error.message)
    ? 'the ACL user lacks +select; grant +select or use database 0'
    : error.message;
  return `REDIS_URL: database ${db} cannot be selected: ${reason}`;
}
