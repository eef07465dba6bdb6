import { RulesError, SettingsError } from './errors.js';
import { createLogger } from './logger.js';
import { createService } from './service.js';
import { readSettings } from './settings.js';

try {
  const settings = readSettings();
  const logger = createLogger(settings);
  const service = createService({ settings, logger });
  await service.start();
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      logger.info({ signal }, 'draining');
      void service.stop().then(() => process.exit(0));
    });
  }
} catch (error) {
  if (!(error instanceof SettingsError || error instanceof RulesError)) throw error;
  console.error(`tollgate: ${error.message}`);
  process.exit(1);
}
