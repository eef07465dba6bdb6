#!/usr/bin/env node
/**
 * The `tollgate` command: the service (`serve`) and the operator tools beside it.
 * Exit codes: 0 success, 1 failure (or OVER_LIMIT from `query`), 2 a usage error.
 */
import { TollgateError } from '@tollgate/client';
import { RulesError, SettingsError, StoreError } from '../core/errors.js';
import { CommandError, UsageError, type Command } from './args.js';
import { checkConfig } from './checkConfig.js';
import { counters } from './counters.js';
import { explain } from './explain.js';
import { query } from './query.js';
import { serve } from './serve.js';
import { PACKAGE_VERSION } from '../core/version.js';

const COMMANDS: readonly Command[] = [serve, checkConfig, query, explain, counters];

const usage = `Usage: tollgate COMMAND [OPTIONS]
       tollgate --version

Commands:
${COMMANDS.map((command) => `  ${command.name.padEnd(14)}${command.summary}`).join('\n')}

Run 'tollgate COMMAND --help' for a command's options. Settings such as DEFAULT_ALGORITHM,
CONFIG_PATH and REDIS_URL come from the environment, as for the service.`;

/** Errors whose message says everything: printed without a stack. */
const EXPECTED = [CommandError, RulesError, SettingsError, StoreError, TollgateError];

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (name === '--help' || name === '-h' || name === 'help') {
    console.log(usage);
    return 0;
  }
  if (name === '--version' || name === '-v' || name === 'version') {
    console.log(`tollgate ${PACKAGE_VERSION}`);
    return 0;
  }
  const command = COMMANDS.find((candidate) => candidate.name === name);
  if (command === undefined) {
    console.error(name === undefined ? usage : `tollgate: unknown command '${name}'\n\n${usage}`);
    return 2;
  }
  try {
    return await command.run(args);
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`tollgate ${command.name}: ${error.message}\n\n${command.usage}`);
      return 2;
    }
    if (EXPECTED.some((type) => error instanceof type)) {
      console.error(`tollgate ${command.name}: ${(error as Error).message}`);
      return 1;
    }
    console.error(error);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
