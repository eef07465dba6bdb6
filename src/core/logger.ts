/**
 * Structured logs: one JSON line per event by default, or one readable line with LOG_FORMAT=text.
 *
 * An error logged as `{ err }` is its type, message, code and its cause's message: a reason on
 * one line. Its stack is logged only at LOG_LEVEL=debug or trace, where it is wanted.
 */
import { pino, stdSerializers, type Logger } from 'pino';
import pretty from 'pino-pretty';

export type { Logger };

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';

export interface LogSettings {
  logLevel: LogLevel;
  logFormat: 'json' | 'text';
}

/** The longest message an error keeps in the log; a parser's message can quote a whole input. */
const MAX_MESSAGE_CHARS = 1_000;

/** The logger of LOG_LEVEL and LOG_FORMAT, writing to stdout, or to stderr with `fd` 2. */
export function createLogger(settings: LogSettings, fd: 1 | 2 = 1): Logger {
  const withStacks = settings.logLevel === 'debug' || settings.logLevel === 'trace';
  const options = {
    level: settings.logLevel,
    base: { service: 'tollgate' },
    serializers: { err: withStacks ? stdSerializers.err : briefError },
  };
  if (settings.logFormat === 'text') {
    return pino(
      options,
      pretty({
        colorize: false,
        sync: true,
        destination: fd,
        singleLine: true,
        // pino-pretty prints an error field over several lines, whatever `singleLine` says: it
        // goes on the message's line instead, as JSON.
        ignore: 'pid,hostname,service,err',
        messageFormat: (log, messageKey) => textMessage(log[messageKey], log.err),
      }),
    );
  }
  return fd === 1 ? pino(options) : pino(options, pino.destination({ fd: 2, sync: true }));
}

/**
 * A start-up that cannot go on (bad settings or rules, a Node line or a Redis it cannot use): one
 * fatal line on stderr in LOG_FORMAT, read here on its own since the settings may be what failed.
 */
export function logRefusal(message: string, env: Record<string, string | undefined>): void {
  const logFormat = /^text$/i.test(env.LOG_FORMAT ?? '') ? 'text' : 'json';
  createLogger({ logLevel: 'info', logFormat }, 2).fatal(message);
}

export interface BriefError {
  type: string;
  message: string;
  code?: string | number;
  cause?: string;
}

/** An error as the log shows it below debug: what and why, on one line, without the stack. */
export function briefError(value: unknown): unknown {
  if (!(value instanceof Error)) return value;
  const brief: BriefError = { type: value.name, message: reason(value.message) };
  const { code } = value as { code?: unknown };
  if (typeof code === 'string' || typeof code === 'number') brief.code = code;
  const { cause } = value;
  if (cause instanceof Error) brief.cause = reason(cause.message);
  else if (typeof cause === 'string') brief.cause = reason(cause);
  return brief;
}

/**
 * A message on one line, bounded. grpc-js ends a failed call's message with "Resolution note: "
 * and nothing after it; the empty note is left out.
 */
function reason(message: string): string {
  const line = oneLine(message.replace(/\.?\s*Resolution note:\s*$/, ''));
  return line.length > MAX_MESSAGE_CHARS ? `${line.slice(0, MAX_MESSAGE_CHARS)}…` : line;
}

function textMessage(message: unknown, err: unknown): string {
  const line = oneLine(typeof message === 'string' ? message : '');
  return err === undefined ? line : `${line} err=${JSON.stringify(err)}`;
}

function oneLine(text: string): string {
  return text.replace(/\s*[\r\n]+\s*/g, ' ').trim();
}

/**
 * Node's process warnings (a deprecation, a listener leak, a warning a library emits) go to the
 * log as one warning line each, instead of Node's own lines on stderr. It is one setting for the
 * process, made once the process has its logger.
 */
export function logProcessWarnings(logger: Logger): void {
  process.removeAllListeners('warning');
  process.on('warning', (warning) => logger.warn({ err: warning }, 'process warning'));
}

/**
 * grpc-js's own lines (its clients, for xDS and tracing, and its server) as the log wants them:
 * one line each, and nothing for an empty one.
 */
export function grpcLogLine(args: readonly unknown[]): string | undefined {
  const line = reason(args.map(String).join(' '));
  return line === '' || /^Resolution note:?$/.test(line) ? undefined : line;
}
