import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Throwaway certificates for TLS tests, made with the openssl CLI in a temporary directory: a
 * CA, two server certificates for 127.0.0.1 and localhost (the second one for rotation) and a
 * client certificate. EC P-256 keys, so the whole set takes a few tens of milliseconds.
 */
export interface TestCerts {
  dir: string;
  /** The CA certificate (PEM path) that signed every other certificate here. */
  ca: string;
  server: CertPair;
  /** Another server certificate for the same names, with another serial number. */
  nextServer: CertPair;
  client: CertPair;
}

export interface CertPair {
  cert: string;
  key: string;
  /** Upper-case hex, as node:tls and X509Certificate report it. */
  serialNumber: string;
}

/** The DNS name in the client certificate's subjectAltName. */
export const CLIENT_SAN = 'envoy.tollgate.test';

// A config of our own, so that the system's openssl.cnf adds no extensions of its own.
const CONFIG = `
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
[client]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectAltName = DNS:${CLIENT_SAN}
`;

export function makeCerts(): TestCerts {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-certs-'));
  const config = join(dir, 'openssl.cnf');
  writeFileSync(config, CONFIG);
  const path = (name: string) => join(dir, name);
  const openssl = (...args: string[]) =>
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });

  const request = (name: string, subject: string, extensions: string, ...signing: string[]) =>
    openssl(
      ...['req', '-x509', '-config', config, '-extensions', extensions, '-days', '2'],
      ...['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', subject],
      ...['-keyout', path(`${name}.key`), '-out', path(`${name}.crt`), ...signing],
    );
  request('ca', '/CN=tollgate test CA', 'ca');

  let serial = 0;
  const issue = (name: string, subject: string, extensions: string): CertPair => {
    serial += 1;
    const ca = ['-CA', path('ca.crt'), '-CAkey', path('ca.key')];
    request(name, subject, extensions, ...ca, '-set_serial', `${Date.now()}${serial}`);
    const cert = path(`${name}.crt`);
    return {
      cert,
      key: path(`${name}.key`),
      serialNumber: new X509Certificate(readFileSync(cert)).serialNumber,
    };
  };

  return {
    dir,
    ca: path('ca.crt'),
    server: issue('server', '/CN=localhost', 'server'),
    nextServer: issue('next-server', '/CN=localhost', 'server'),
    client: issue('client', `/CN=${CLIENT_SAN}`, 'client'),
  };
}
