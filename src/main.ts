import { RulesError, SettingsError } from './errors.js';
import { run } from './workers.js';

// The wiring is service.ts; the process around it, alone or as a cluster of WORKERS, workers.ts.
try {
  await run();
} catch (error) {
  if (!(error instanceof SettingsError || error instanceof RulesError)) throw error;
  console.error(`tollgate: ${error.message}`);
  process.exit(1);
}
