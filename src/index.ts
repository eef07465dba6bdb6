/**
 * tollgate's public API: the client for services that call tollgate directly, which is the
 * @tollgate/client package, re-exported.
 *
 * The service itself (createService, readSettings) is left out on purpose: importing it loads
 * ioredis, pino, prom-client and OpenTelemetry, about three times the client's start-up cost,
 * which every caller of the client would pay. Embedding wants its own entry point.
 */
export * from '@tollgate/client';
