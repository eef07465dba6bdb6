import { RulesError, SettingsError } from '../core/errors.js';
import { logRefusal } from '../core/logger.js';
import { checkNodeLine } from '../core/nodeLines.js';
import { positionalsOrHelp, UsageError, type Command } from './args.js';

const usage = `Usage: tollgate serve

Runs the service, as 'npm start' does: the gRPC server on GRPC_PORT (8081) and the HTTP
endpoints on PORT (8080), with every setting read from the environment. It runs until SIGTERM
or SIGINT, then drains and stops.

Options:
  -h, --help  Show this help`;

/**
 * Starts the service: alone, or as the primary of WORKERS (whose workers run this same command).
 * A Node line outside package.json's engines, bad settings or bad rules log one fatal line on
 * stderr, in LOG_FORMAT and without a stack, and exit 1.
 */
export async function startService(): Promise<void> {
  try {
    // Before the service's modules load: on another line, they might fail in ways of their own.
    checkNodeLine(process.versions.node, process.env);
    // Loaded only here, so that the other commands do not pay for the service's modules.
    const { run } = await import('../process/workers.js');
    await run();
  } catch (error) {
    if (!(error instanceof SettingsError || error instanceof RulesError)) throw error;
    logRefusal(error.message, process.env);
    process.exit(1);
  }
}

export const serve: Command = {
  name: 'serve',
  summary: 'run the service (settings from the environment)',
  usage,
  async run(args) {
    const positionals = positionalsOrHelp(args, usage);
    if (positionals === undefined) return 0;
    if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`);
    await startService();
    return 0;
  },
};
