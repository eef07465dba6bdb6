/** Structured logs: JSON lines by default, or one readable line per event with LOG_FORMAT=text. */
import { pino, type Logger } from 'pino';
import pretty from 'pino-pretty';

export type { Logger };

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';

export interface LogSettings {
  logLevel: LogLevel;
  logFormat: 'json' | 'text';
}

export function createLogger(settings: LogSettings): Logger {
  const options = { level: settings.logLevel, base: { service: 'tollgate' } };
  if (settings.logFormat === 'text') {
    return pino(options, pretty({ colorize: false, sync: true, ignore: 'pid,hostname,service' }));
  }
  return pino(options);
}
