/** The gRPC server's certificate files: read at start-up, then watched for rotation. */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { SettingsError } from '../../core/errors.js';
import type { GrpcTlsSettings } from './serverSettings.js';

type IdentityUpdate = grpc.experimental.IdentityCertificateUpdate;
type CaUpdate = grpc.experimental.CaCertificateUpdate;

/**
 * grpc-js's FileWatcherCertificateProvider, changed twice. It starts from the files read at
 * start-up: the watcher reads asynchronously and grpc-js drops every connection until it has, so
 * a client connecting right after `listen` would be refused. And it passes on only files that can
 * serve: where grpc-js would drop every new connection on a missing file or on a key that does not
 * match its certificate (a rotation half done), the previous files stay and the error is told.
 */
export function createFilesProvider(
  tls: GrpcTlsSettings,
  initial: { identity: IdentityUpdate; ca: CaUpdate | undefined },
  refreshIntervalMs: number,
  onReloadError: (error: Error) => void,
): grpc.experimental.CertificateProvider {
  const watcher = new grpc.experimental.FileWatcherCertificateProvider({
    certificateFile: tls.certPath,
    privateKeyFile: tls.keyPath,
    caCertificateFile: tls.clientCaPath,
    refreshIntervalMs,
  });
  let { identity, ca } = initial;
  const identityListeners = new Set<grpc.experimental.IdentityCertificateUpdateListener>();
  const caListeners = new Set<grpc.experimental.CaCertificateUpdateListener>();

  const unchanged = (update: IdentityUpdate) =>
    update.certificate.equals(identity.certificate) &&
    update.privateKey.equals(identity.privateKey);
  const onIdentity = (update: IdentityUpdate | null) => {
    if (update && unchanged(update)) return;
    const problem = update ? identityProblem(update) : 'cannot be read';
    if (!update || problem) {
      onReloadError(
        new Error(
          `GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY: ${problem}; still serving the previous ones`,
        ),
      );
      return;
    }
    identity = update;
    for (const listener of identityListeners) listener(identity);
  };
  const onCa = (update: CaUpdate | null) => {
    if (update && ca && update.caCertificate.equals(ca.caCertificate)) return;
    const problem = update ? caProblem(update) : 'cannot be read';
    if (!update || problem) {
      onReloadError(new Error(`GRPC_CLIENT_TLS_CACERT: ${problem}; still using the previous one`));
      return;
    }
    ca = update;
    for (const listener of caListeners) listener(ca);
  };

  // The files are watched while grpc-js listens, i.e. while the server is bound.
  let watching = false;
  const watch = () => {
    const wanted = identityListeners.size + caListeners.size > 0;
    if (wanted === watching) return;
    watching = wanted;
    const watchCa = tls.clientCaPath !== undefined;
    if (wanted) {
      watcher.addIdentityCertificateListener(onIdentity);
      if (watchCa) watcher.addCaCertificateListener(onCa);
    } else {
      watcher.removeIdentityCertificateListener(onIdentity);
      if (watchCa) watcher.removeCaCertificateListener(onCa);
    }
  };
  // grpc-js registers its own listener right after adding ours, so ours is told on the next tick.
  return {
    addIdentityCertificateListener(listener) {
      identityListeners.add(listener);
      watch();
      process.nextTick(() => identityListeners.has(listener) && listener(identity));
    },
    removeIdentityCertificateListener(listener) {
      identityListeners.delete(listener);
      watch();
    },
    addCaCertificateListener(listener) {
      caListeners.add(listener);
      watch();
      process.nextTick(() => caListeners.has(listener) && listener(ca ?? null));
    },
    removeCaCertificateListener(listener) {
      caListeners.delete(listener);
      watch();
    },
  };
}

/** The files at start-up; any that cannot serve stops it, naming its setting. */
export function readFiles(tls: GrpcTlsSettings): {
  identity: IdentityUpdate;
  ca: CaUpdate | undefined;
} {
  const read = (setting: string, path: string): Buffer => {
    try {
      return readFileSync(path);
    } catch (error) {
      throw new SettingsError(`${setting}: cannot read '${path}': ${(error as Error).message}`);
    }
  };
  const identity = {
    certificate: read('GRPC_SERVER_TLS_CERT', tls.certPath),
    privateKey: read('GRPC_SERVER_TLS_KEY', tls.keyPath),
  };
  const problem = identityProblem(identity);
  if (problem) throw new SettingsError(`GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY: ${problem}`);
  if (tls.clientCaPath === undefined) return { identity, ca: undefined };
  const ca = { caCertificate: read('GRPC_CLIENT_TLS_CACERT', tls.clientCaPath) };
  const caFault = caProblem(ca);
  if (caFault) throw new SettingsError(`GRPC_CLIENT_TLS_CACERT: '${tls.clientCaPath}' ${caFault}`);
  return { identity, ca };
}

function identityProblem(update: IdentityUpdate): string | undefined {
  try {
    createSecureContext({ cert: update.certificate, key: update.privateKey });
    return undefined;
  } catch (error) {
    return `not a certificate and its key (${(error as Error).message})`;
  }
}

function caProblem(update: CaUpdate): string | undefined {
  try {
    new X509Certificate(update.caCertificate); // createSecureContext takes a file without any
    return undefined;
  } catch (error) {
    return `holds no certificate (${(error as Error).message})`;
  }
}
