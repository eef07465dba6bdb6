/**
 * TLS for the gRPC server, with the reference's settings: a certificate and key
 * (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY), mutual TLS when GRPC_CLIENT_TLS_CACERT is set, and
 * GRPC_CLIENT_TLS_SAN to admit only the client certificate for one name.
 *
 * The files are read again every few seconds, so a rotated certificate (cert-manager, a
 * Kubernetes secret) serves new connections without a restart; open connections keep theirs.
 */
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { SettingsError } from '../../core/errors.js';
import { createFilesProvider, readFiles } from './certificateProvider.js';
import type { GrpcTlsSettings } from './serverSettings.js';

export type { GrpcTlsSettings };

/** How often the certificate files are read again: a rotation applies within this time. */
export const CERT_REFRESH_INTERVAL_MS = 5_000;

export interface ServerCredentialsOptions {
  refreshIntervalMs?: number;
  /** Told when changed files cannot serve, and the previous ones stay; a warning by default. */
  onReloadError?: (error: Error) => void;
}

/** Insecure without `tls`. Bad files stop start-up with a SettingsError naming the setting. */
export function createServerCredentials(
  tls: GrpcTlsSettings | undefined,
  options: ServerCredentialsOptions = {},
): grpc.ServerCredentials {
  if (!tls) return grpc.ServerCredentials.createInsecure();
  const mutual = tls.clientCaPath !== undefined;
  if (tls.clientSan !== undefined && !mutual) {
    throw new SettingsError(
      'GRPC_CLIENT_TLS_SAN: needs GRPC_CLIENT_TLS_CACERT, since only verified client certificates are checked',
    );
  }
  const files = createFilesProvider(
    tls,
    readFiles(tls),
    options.refreshIntervalMs ?? CERT_REFRESH_INTERVAL_MS,
    options.onReloadError ?? ((error) => process.emitWarning(error)),
  );
  // grpc-js declares the parameters as (ca, identity, ...) but uses them as (identity, ca, ...).
  const credentials = grpc.experimental.createCertificateProviderServerCredentials(
    files,
    mutual ? files : null,
    mutual,
  );
  if (tls.clientSan === undefined) return credentials;
  return grpc.experimental.createServerCredentialsWithInterceptors(credentials, [
    requireClientSan(tls.clientSan),
  ]);
}

/**
 * GRPC_CLIENT_TLS_SAN as the reference checks it (Go's `VerifyHostname`): the name, a DNS name
 * that may match a wildcard, or an IP address, is in the verified certificate's subjectAltName.
 * The subject's CN never counts, as in Go since 1.15.
 */
export function matchesClientSan(certificate: PeerCertificate | undefined, san: string): boolean {
  if (!certificate?.subjectaltname) return false;
  const withoutCn = { ...certificate, subject: { ...certificate.subject, CN: '' } };
  return checkServerIdentity(san, withoutCn) === undefined;
}

/**
 * Refuses every call, on every service, from a client whose certificate is not for `san`. The
 * reference refuses the TLS handshake instead; Node's TLS server offers no hook for that, so the
 * check runs when a call's headers arrive, before any handler sees the call.
 */
function requireClientSan(san: string): grpc.ServerInterceptor {
  return (_method, call) =>
    new grpc.ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMetadata: (metadata, nextMetadata) => {
            if (matchesClientSan(call.getAuthContext().sslPeerCertificate, san)) {
              nextMetadata(metadata);
            } else {
              call.sendStatus({
                code: grpc.status.PERMISSION_DENIED,
                details: `the client certificate is not for ${san} (GRPC_CLIENT_TLS_SAN)`,
              });
            }
          },
        }),
    });
}
