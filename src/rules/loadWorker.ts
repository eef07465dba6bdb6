/**
 * The worker thread of the rules loader (loadOffThread.ts), which serves one load after another:
 * for each it loads the rules, then hands them over in batches of records, one batch each time
 * the serving thread asks for the next (see ruleRecords.ts). The last batch says how much heap the
 * thread holds then, so that the loader can tell whether to keep it.
 */
import { getHeapStatistics } from 'node:v8';
import { parentPort } from 'node:worker_threads';
import type { LoadRulesOptions } from './loadRules.js';
import { ruleRecords, type RuleRecord } from './ruleRecords.js';
import { loadSource, type RulesInput } from './rulesInput.js';

/** To the worker: a load, or the next batch of one. */
export type LoadRequest =
  | { load: number; source: RulesInput; options: LoadRulesOptions; batchSize: number }
  | { next: number };

/**
 * From the worker: a batch, the last one with `done` and `heapBytes`, the heap the thread holds
 * then; or the error that refused the rules.
 */
export type LoadWorkerMessage =
  | { id: number; records: RuleRecord[]; done: boolean; heapBytes?: number }
  | { id: number; error: { name: string; message: string } };

/** The heap this thread holds: what V8 has taken for its heap, and what it allocated besides. */
function heapBytes(): number {
  const heap = getHeapStatistics();
  return heap.total_heap_size + heap.malloced_memory + heap.external_memory;
}

const port = parentPort;
if (port === null) throw new Error('loadWorker.js runs as a worker thread');

/** The load being handed over, if any; a new load replaces it. */
let current: { id: number; records: Generator<RuleRecord>; batchSize: number } | undefined;

function start(request: Extract<LoadRequest, { load: number }>): void {
  current = undefined;
  try {
    const records = ruleRecords(loadSource(request.source, request.options));
    current = { id: request.load, records, batchSize: request.batchSize };
  } catch (error) {
    const { name, message } = error instanceof Error ? error : new Error(String(error));
    port?.postMessage({ id: request.load, error: { name, message } } satisfies LoadWorkerMessage);
    return;
  }
  sendBatch();
}

function sendBatch(): void {
  if (current === undefined) return;
  const { id, records, batchSize } = current;
  const batch: RuleRecord[] = [];
  for (let next = records.next(); !next.done; next = records.next()) {
    batch.push(next.value);
    if (batch.length >= batchSize) {
      port?.postMessage({ id, records: batch, done: false } satisfies LoadWorkerMessage);
      return;
    }
  }
  current = undefined; // what it held goes with it
  port?.postMessage({
    id,
    records: batch,
    done: true,
    heapBytes: heapBytes(),
  } satisfies LoadWorkerMessage);
}

port.on('message', (request: LoadRequest) => {
  if ('load' in request) start(request);
  else if (current?.id === request.next) sendBatch();
});
