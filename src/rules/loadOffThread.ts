/**
 * Loads the rules on a worker thread, so that a reload never holds the serving thread: parsing a
 * 4 MiB file takes seconds. The rules come back in batches of records (ruleRecords.ts), the next
 * asked for only once the last is rebuilt and the event loop has run, so no call waits behind
 * more than one batch. The worker has its own heap limit and a time limit: a load that exhausts
 * either fails, the worker is replaced at the next load, and the process and the rules in force
 * are untouched.
 *
 * One worker serves load after load, one at a time: starting a worker (a V8 isolate, then the
 * reader's modules) costs tens of milliseconds of CPU, which a management server sending update
 * after update would otherwise make the process pay each time. But a worker is kept only while
 * it holds little: V8 keeps the heap a load grew to long after the load, so a refused load, which
 * may have expanded far before it was refused, and a load that left the heap over KEEP_HEAP_MB,
 * end their worker, which gives its memory back, and the next load starts a new one.
 *
 * From the TypeScript sources (the tests that run the service in their own process) there is no
 * compiled worker to start: the rules then load on this thread, as at start-up.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { RulesError } from '../core/errors.js';
import type { LoadRulesOptions } from './loadRules.js';
import type { LoadRequest, LoadWorkerMessage } from './loadWorker.js';
import { createRuleAssembler } from './ruleRecords.js';
import { loadSource, sourceName, type RulesInput } from './rulesInput.js';
import type { RuleSet } from './types.js';

/**
 * The worker's heap. The largest file allowed (4 MiB, 50,000 rules) loads in it, and needs more
 * than 320 MB; with it, the process as a whole peaks at about 490 MB on Node 20 and 520 MB on
 * Node 24 while that file loads (test/integration/rulesLoading.test.ts), under the chart's 768 Mi
 * limit with room to spare.
 */
export const LOAD_HEAP_MB = 384;
/**
 * The worker's young generation, fixed at what Node 20 gave it rather than left to the Node line:
 * Node 24 sizes it larger, which added about 85 MB to that peak (600 MB in all). A smaller one
 * saves little more and slows the load.
 */
export const LOAD_YOUNG_MB = 48;
/**
 * How long a load may take before it counts as hung. The largest file allowed loads in 9 to 16 s
 * on a quiet 2-core host (the YAML parser reads under 1 MB a second there), and four times
 * slower on a host whose cores are all taken: a valid file must not be refused for that.
 */
export const LOAD_TIMEOUT_MS = 180_000;
/**
 * The most heap a worker may hold after a load and still serve the next. A small rule set leaves
 * it at about 25 MB, so a stream of ordinary updates keeps one worker.
 */
export const KEEP_HEAP_MB = 64;
/** Rules per batch: each is copied and rebuilt in a few milliseconds. */
const BATCH_SIZE = 1_000;

const workerFile = fileURLToPath(new URL('./loadWorker.js', import.meta.url));

export interface RulesLoader {
  /** Loads one source's rules; loads run one after another, in the order asked. */
  load(source: RulesInput, options: LoadRulesOptions): Promise<RuleSet>;
  /** Ends the worker; a load under way fails. */
  close(): Promise<void>;
}

export function createRulesLoader(): RulesLoader {
  const state: LoaderState = {
    worker: undefined,
    queue: Promise.resolve(),
    nextId: 1,
    closed: false,
  };
  return {
    load(source, options) {
      const loaded = state.queue.then(() => loadOne(state, source, options));
      state.queue = loaded.then(
        () => undefined,
        () => undefined,
      );
      return loaded;
    },
    async close() {
      state.closed = true;
      const { worker } = state;
      state.worker = undefined;
      await worker?.terminate();
    },
  };
}

interface LoaderState {
  worker: Worker | undefined;
  /** The loads asked for so far: the next starts when the last has settled. */
  queue: Promise<void>;
  nextId: number;
  closed: boolean;
}

function workerOf(state: LoaderState): Worker {
  if (state.worker !== undefined) return state.worker;
  const worker = new Worker(workerFile, {
    resourceLimits: {
      maxOldGenerationSizeMb: LOAD_HEAP_MB,
      maxYoungGenerationSizeMb: LOAD_YOUNG_MB,
    },
  });
  // An idle loader must not keep the process alive.
  worker.unref();
  const forget = () => {
    if (state.worker === worker) state.worker = undefined;
  };
  worker.once('exit', forget);
  // Always listened to: a worker may report more than one error (out of memory, then its end),
  // and an 'error' with no listener would end the whole process.
  worker.on('error', forget);
  state.worker = worker;
  return worker;
}

function loadOne(
  state: LoaderState,
  source: RulesInput,
  options: LoadRulesOptions,
): Promise<RuleSet> {
  if (!existsSync(workerFile)) return Promise.resolve().then(() => loadSource(source, options));
  if (state.closed) return Promise.reject(new RulesError('the rules loader is closed'));
  const name = sourceName(source);
  const worker = workerOf(state);
  const id = state.nextId++;
  return new Promise<RuleSet>((resolve, reject) => {
    const assembler = createRuleAssembler();
    let settled = false;
    /** Ends the worker, so that the next load starts a new one. */
    const retire = () => {
      if (state.worker === worker) state.worker = undefined;
      void worker.terminate();
    };
    const settle = (error: Error | undefined, rules?: RuleSet) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      worker.off('message', onMessage);
      worker.off('error', onError);
      worker.off('exit', onExit);
      if (error) reject(error);
      else resolve(rules as RuleSet);
    };
    /** The worker cannot be trusted with another load: it is ended, and the next starts anew. */
    const abandon = (error: Error) => {
      settle(error);
      retire();
    };
    const timer = setTimeout(
      () =>
        abandon(new RulesError(`${name}: rules did not load within ${LOAD_TIMEOUT_MS / 1000} s`)),
      LOAD_TIMEOUT_MS,
    );
    timer.unref();
    const onMessage = (message: LoadWorkerMessage) => {
      if (message.id !== id) return;
      if ('error' in message) {
        const { name: kind, message: text } = message.error;
        // What the refused load expanded to may still hold the worker's heap.
        return abandon(kind === 'RulesError' ? new RulesError(text) : new Error(text));
      }
      try {
        assembler.add(message.records);
      } catch (error) {
        return abandon(error as Error);
      }
      if (message.done) {
        settle(undefined, assembler.finish());
        if ((message.heapBytes ?? 0) > KEEP_HEAP_MB * 1024 * 1024) retire();
        return;
      }
      // The next batch only after this turn of the event loop: calls go first.
      setImmediate(() => !settled && worker.postMessage({ next: id }));
    };
    const onError = (error: Error & { code?: string }) =>
      abandon(
        error.code === 'ERR_WORKER_OUT_OF_MEMORY'
          ? new RulesError(`${name}: loading the rules needed more than ${LOAD_HEAP_MB} MB`)
          : error,
      );
    const onExit = (code: number) =>
      settle(new RulesError(`${name}: the rules loader stopped (exit ${code}) before it finished`));
    worker.on('message', onMessage);
    worker.on('error', onError);
    worker.on('exit', onExit);
    worker.postMessage({ load: id, source, options, batchSize: BATCH_SIZE } satisfies LoadRequest);
  });
}
