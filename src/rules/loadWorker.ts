/**
 * The worker thread of `loadRulesOffThread`: loads the rules, then hands them over in batches of
 * records, one batch each time the serving thread asks for the next (see ruleRecords.ts).
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { LoadRulesOptions } from './loadRules.js';
import { ruleRecords, type RuleRecord } from './ruleRecords.js';
import { loadSource, type RulesSource } from './rulesSource.js';

export interface LoadWorkerData {
  source: RulesSource;
  options: LoadRulesOptions;
  batchSize: number;
}

/** From the worker: a batch, the last one with `done`; or the error that refused the rules. */
export type LoadWorkerMessage =
  { records: RuleRecord[]; done: boolean } | { error: { name: string; message: string } };

const port = parentPort;
if (port === null) throw new Error('loadWorker.js runs as a worker thread');
const { source, options, batchSize } = workerData as LoadWorkerData;

function start(): Generator<RuleRecord> | undefined {
  try {
    return ruleRecords(loadSource(source, options));
  } catch (error) {
    const { name, message } = error instanceof Error ? error : new Error(String(error));
    port?.postMessage({ error: { name, message } } satisfies LoadWorkerMessage);
    return undefined;
  }
}

const records = start();
if (records !== undefined) {
  const sendBatch = (): void => {
    const batch: RuleRecord[] = [];
    for (let next = records.next(); !next.done; next = records.next()) {
      batch.push(next.value);
      if (batch.length >= batchSize) {
        port.postMessage({ records: batch, done: false } satisfies LoadWorkerMessage);
        return;
      }
    }
    // The serving thread ends the worker once it has the last batch.
    port.postMessage({ records: batch, done: true } satisfies LoadWorkerMessage);
  };
  port.on('message', sendBatch);
  sendBatch();
}
