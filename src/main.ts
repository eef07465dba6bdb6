import { startService } from './cli/serve.js';

// The wiring is process/service.ts; the process around it, alone or as a cluster of WORKERS,
// process/workers.ts.
await startService();
