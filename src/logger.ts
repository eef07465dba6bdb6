import { pino, type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { Settings } from './settings.js';

export type { Logger };

/** Structured logs: JSON lines by default, or one readable line per event with LOG_FORMAT=text. */
export function createLogger(settings: Pick<Settings, 'logLevel' | 'logFormat'>): Logger {
  const options = { level: settings.logLevel, base: { service: 'tollgate' } };
  if (settings.logFormat === 'text') {
    return pino(options, pretty({ colorize: false, sync: true, ignore: 'pid,hostname,service' }));
  }
  return pino(options);
}
