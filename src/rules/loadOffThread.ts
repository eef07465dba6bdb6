/**
 * Loads the rules on a worker thread, so that a reload never holds the serving thread: parsing a
 * 4 MiB file takes seconds. The rules come back in batches of records (ruleRecords.ts), the next
 * asked for only once the last is rebuilt and the event loop has run, so no call waits behind
 * more than one batch. The worker has its own heap limit and a time limit: a file that exhausts
 * either fails the reload, and the process and the rules in force are untouched.
 *
 * From the TypeScript sources (the tests that run the service in their own process) there is no
 * compiled worker to start: the rules then load on this thread, as at start-up.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { RulesError } from '../errors.js';
import type { LoadRulesOptions } from './loadRules.js';
import type { LoadWorkerData, LoadWorkerMessage } from './loadWorker.js';
import { createRuleAssembler } from './ruleRecords.js';
import { loadSource, sourceName, type RulesSource } from './rulesSource.js';
import type { RuleSet } from './types.js';

/** The worker's heap: twice what the largest file allowed (4 MiB, 50,000 rules) needs. */
export const LOAD_HEAP_MB = 768;
/** How long a load may take; the largest file allowed loads in about 5 s on a loaded 2-core host. */
export const LOAD_TIMEOUT_MS = 60_000;
/** Rules per batch: each is copied and rebuilt in a few milliseconds. */
const BATCH_SIZE = 1_000;

const workerFile = fileURLToPath(new URL('./loadWorker.js', import.meta.url));

export function loadRulesOffThread(
  source: RulesSource,
  options: LoadRulesOptions,
): Promise<RuleSet> {
  if (!existsSync(workerFile)) return Promise.resolve().then(() => loadSource(source, options));
  const name = sourceName(source);
  return new Promise<RuleSet>((resolve, reject) => {
    const data: LoadWorkerData = { source, options, batchSize: BATCH_SIZE };
    const worker = new Worker(workerFile, {
      workerData: data,
      resourceLimits: { maxOldGenerationSizeMb: LOAD_HEAP_MB },
    });
    const assembler = createRuleAssembler();
    let settled = false;
    const settle = (error: Error | undefined, rules?: RuleSet) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      void worker.terminate();
      if (error) reject(error);
      else resolve(rules as RuleSet);
    };
    const timer = setTimeout(
      () =>
        settle(new RulesError(`${name}: rules did not load within ${LOAD_TIMEOUT_MS / 1000} s`)),
      LOAD_TIMEOUT_MS,
    );
    timer.unref();
    worker.on('message', (message: LoadWorkerMessage) => {
      if ('error' in message) {
        const { name: kind, message: text } = message.error;
        return settle(kind === 'RulesError' ? new RulesError(text) : new Error(text));
      }
      try {
        assembler.add(message.records);
      } catch (error) {
        return settle(error as Error);
      }
      if (message.done) return settle(undefined, assembler.finish());
      // The next batch only after this turn of the event loop: calls go first.
      setImmediate(() => !settled && worker.postMessage('next'));
    });
    worker.on('error', (error: Error & { code?: string }) =>
      settle(
        error.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? new RulesError(`${name}: loading the rules needed more than ${LOAD_HEAP_MB} MB`)
          : error,
      ),
    );
    worker.on('exit', (code) =>
      settle(new RulesError(`${name}: the rules loader stopped (exit ${code}) before it finished`)),
    );
  });
}
