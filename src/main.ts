import { startService } from './cli/serve.js';

// The wiring is service.ts; the process around it, alone or as a cluster of WORKERS, workers.ts.
await startService();
