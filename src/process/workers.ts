/**
 * The process around the service: WORKERS=1 runs it here; WORKERS>1 makes this process a
 * node:cluster primary that serves nothing. The primary forks the workers, each a whole service.
 * Their gRPC and HTTP listeners are one socket each, held by the primary, and it hands each new
 * connection to the next worker. It replaces a worker that dies, with a backoff, and answers a
 * worker's /metrics with every worker's counts summed, one sum at a time. On SIGTERM it forwards the signal and exits
 * once they have all drained. This is the only module that imports node:cluster.
 */
import cluster, { type Worker } from 'node:cluster';
import { RulesError, SettingsError } from '../core/errors.js';
import { createLogger, logProcessWarnings, logRefusal, type Logger } from '../core/logger.js';
import {
  createMetrics,
  createMetricsAggregator,
  type MetricsSnapshot,
} from '../observability/metrics.js';
import { shareBuilds } from '../observability/exposition.js';
import { loadRules } from '../rules/loadRules.js';
import { createService } from './service.js';
import { readSettings, type Settings } from './settings.js';

/** A dead worker is replaced after 0.1 s; in a crash loop, 0.2 s, 0.4 s ... up to 30 s. */
const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 30_000;
/** A worker that served this long has broken the loop: its replacement starts at once again. */
const STABLE_MS = 30_000;
/** A worker that does not hand over its counts in time is summed with its previous ones. */
const SNAPSHOT_TIMEOUT_MS = 2_000;
/** How long a worker's /metrics waits for the primary's sum. */
const EXPOSITION_TIMEOUT_MS = 5_000;
/** Set by the primary on its workers, so that running under another cluster (PM2) is no worker. */
const WORKER_MARK = 'TOLLGATE_CLUSTER_WORKER';

type Exposition = { contentType: string; body: string };
/** The messages on the cluster channel, all with a `tollgate:` type. */
type Message =
  | { type: 'tollgate:ready' }
  | { type: 'tollgate:failed'; name: string; message: string }
  | { type: 'tollgate:metrics'; id: number }
  | { type: 'tollgate:snapshot'; id: number; snapshot: MetricsSnapshot }
  | { type: 'tollgate:collect'; id: number }
  | { type: 'tollgate:exposition'; id: number; exposition?: Exposition; error?: string };

const isMessage = (value: unknown): value is Message =>
  typeof value === 'object' &&
  value !== null &&
  String((value as { type?: unknown }).type).startsWith('tollgate:');

/**
 * Runs tollgate in this process, in whichever role it has, and resolves once it serves. A bad
 * setting or rules file rejects with its SettingsError or RulesError; a start-up error that the
 * workers meet instead (a port in use), the primary reports itself, once, and exits 1.
 */
export async function run(): Promise<void> {
  if (cluster.isWorker && process.env[WORKER_MARK] === '1') return runWorker();
  const settings = readSettings();
  const logger = createLogger(settings);
  logProcessWarnings(logger);
  if (settings.workers === 1) return runAlone(settings, logger);
  if (!cluster.isPrimary) {
    throw new SettingsError('WORKERS: more than 1 needs tollgate to be its own cluster primary');
  }
  return runPrimary(settings, logger);
}

/**
 * What each signal does, in every role:
 * - SIGTERM, SIGINT: drain (health NOT_SERVING, calls in flight finish), then exit 0. Alone,
 *   one that comes before start-up has ended exits 0 at once; a worker drains once started.
 * - SIGHUP: load the rules again; the current ones serve meanwhile. A primary passes it on to
 *   each worker once that worker is ready.
 * - SIGUSR1, SIGUSR2, SIGQUIT: logged and ignored. Node would end the process at once on
 *   SIGUSR2 and SIGQUIT, every call in flight failing, and open its inspector on SIGUSR1.
 */
const IGNORED_SIGNALS = ['SIGUSR1', 'SIGUSR2', 'SIGQUIT'] as const;
const STOP_SIGNALS = ['SIGTERM', 'SIGINT'] as const;

function ignoreSignals(logger: Logger): void {
  for (const signal of IGNORED_SIGNALS) {
    process.on(signal, () =>
      logger.warn({ signal }, 'signal ignored: SIGTERM drains, SIGHUP reloads the rules'),
    );
  }
}

function reloadOnHangup(logger: Logger, reload: () => void): void {
  process.on('SIGHUP', () => {
    logger.info({ signal: 'SIGHUP' }, 'reloading the rules');
    reload();
  });
}

async function runAlone(settings: Settings, logger: Logger): Promise<void> {
  ignoreSignals(logger);
  const service = createService({ settings, logger });
  reloadOnHangup(logger, () => service.reload());
  // Until start-up ends, nothing has served: a stop ends the process at once, with status 0 as a
  // stop that was asked for, where Node would end it by the signal. Start-up may wait long (for
  // the first rules from xDS), so waiting for it to drain after it would not do.
  //
  // One listener per signal for the whole run, which changes what it does once start-up ends.
  // Node hands a signal to the listeners there were when it arrived: one that arrives in the turn
  // that ends start-up, with its listener removed and another added in that turn, reaches
  // neither, and the process would run on until killed.
  let onStop: (signal: NodeJS.Signals) => void = (signal) => {
    logger.info({ signal }, 'stopped during start-up');
    process.exit(0);
  };
  for (const signal of STOP_SIGNALS) process.on(signal, () => onStop(signal));
  await holdingOpen(service.start());
  let draining = false;
  onStop = (signal) => {
    if (draining) return;
    draining = true;
    logger.info({ signal }, 'draining');
    void service.stop().then(
      () => process.exit(0),
      (error: unknown) => exitAfterFailedStop(logger, error),
    );
  };
}

/**
 * Holds the process open until start-up has settled. It may wait on nothing else that does: for
 * the first rules from an xDS server that refuses, the client's retry timer does not, and Node
 * would end the process with status 13 (a top-level await left unsettled).
 */
async function holdingOpen<T>(startup: Promise<T>): Promise<T> {
  const hold = setInterval(() => undefined, 60_000);
  try {
    return await startup;
  } finally {
    clearInterval(hold);
  }
}

interface Member {
  worker: Worker;
  slot: number;
  /** When it said it was listening; 0 until then. */
  readyAt: number;
  /**
   * A SIGHUP came while it was starting: it is passed on once the worker is ready. Sent earlier,
   * before the worker's handler exists, the signal would end it, and during the primary's own
   * start-up that would stop the whole service.
   */
  reloadPending?: boolean;
  /** Its start-up error, when it reported one. */
  failure?: { name: string; message: string };
  /** Its latest counts, kept so that a slow or dead worker still adds up. */
  last?: MetricsSnapshot;
  /** Snapshot requests waiting on it, by id. */
  waiting: Map<number, (snapshot?: MetricsSnapshot) => void>;
}

/**
 * Where the primary is in its life. Start-up and the drain may overlap: a SIGTERM, or a worker
 * that fails to start, begins the drain before every worker is ready.
 */
interface Course {
  starting: boolean;
  stopping: boolean;
  exitCode: number;
  /** What stops start-up, as `tollgate: ` prints it; the first worker's only. */
  startupError: string | undefined;
}

/** Composes the parts below; resolves once every worker is ready, or once a drain begins. */
function runPrimary(settings: Settings, logger: Logger): Promise<void> {
  checkRulesOnce(settings);
  // Structured clone, so metric values such as NaN cross the channel intact.
  cluster.setupPrimary({ serialization: 'advanced' });

  return new Promise((started) => {
    const course: Course = {
      starting: true,
      stopping: false,
      exitCode: 0,
      startupError: undefined,
    };
    const pool = createPool(settings.workers, logger, { message: onMessage, exit: onExit });
    const metrics = createClusterMetrics(pool.members);
    const stop = (): void =>
      drainWorkers(course, pool, settings.shutdownGraceMs, () => exitPrimary(course, logger));

    function onMessage(member: Member, message: Message): void {
      if (message.type === 'tollgate:ready') {
        workerReady(member, logger);
        const ready = [...pool.members.values()].filter((m) => m.readyAt > 0).length;
        if (course.starting && ready === settings.workers) {
          course.starting = false;
          logger.info({ workers: settings.workers }, 'workers ready');
          started();
        }
      } else if (message.type === 'tollgate:failed') {
        member.failure = { name: message.name, message: message.message };
        if (!course.starting) {
          logger.error(
            { worker: member.worker.id, error: message.message },
            'worker failed to start',
          );
        }
      } else if (message.type === 'tollgate:snapshot') {
        metrics.received(member, message.id, message.snapshot);
      } else if (message.type === 'tollgate:metrics') {
        metrics.answer(member.worker, message.id);
      }
    }

    function onExit(member: Member, code: number | null, signal: string | null): void {
      metrics.retire(member);
      const { worker } = member;
      const exit = { worker: worker.id, pid: worker.process.pid, code, signal };
      if (course.stopping) {
        // A worker not yet listening had nothing to drain.
        if (member.readyAt > 0 && code !== 0) {
          course.exitCode = 1;
          logger.error(exit, 'worker did not drain');
        }
        if (pool.members.size === 0) exitPrimary(course, logger);
      } else if (course.starting && member.readyAt === 0) {
        // The same error would meet every worker and every replacement: report it once, and stop.
        course.startupError = startupError(member, code, signal);
        stop();
      } else {
        const delay = pool.replace(member);
        logger.error({ ...exit, replaceInMs: delay }, 'worker exited; replacing it');
        metrics.countRestart();
      }
    }

    handlePrimarySignals(logger, {
      drain(signal) {
        if (course.stopping) return;
        logger.info({ signal, workers: pool.members.size }, 'draining');
        stop();
        started();
      },
      reload() {
        logger.info(
          { signal: 'SIGHUP', workers: pool.members.size },
          'reloading the rules in every worker',
        );
        reloadWorkers(pool.members.values());
      },
    });
    pool.start();
  });
}

/**
 * Bad rules stop start-up here, once, instead of in every worker and every replacement. Over xDS
 * each worker keeps a stream of its own, and the management server is told what it refuses.
 */
function checkRulesOnce(settings: Settings): void {
  if (settings.xds !== undefined) return;
  loadRules(settings.configPath, {
    defaultAlgorithm: settings.defaultAlgorithm,
    mergeDomainConfig: settings.mergeDomainConfig,
    referenceKeys: settings.referenceKeys,
  });
}

function send(worker: Worker, message: Message): void {
  // With a callback, a closed channel is an argument rather than an 'error' event.
  if (worker.isConnected()) worker.send(message, () => {});
}

/** What the pool tells of its workers. */
interface PoolEvents {
  message(member: Member, message: Message): void;
  /** Once per worker, after its last messages have been read; it has left `members` by then. */
  exit(member: Member, code: number | null, signal: string | null): void;
}

/** The workers, one per slot, each replaced after its slot's backoff when it dies. */
interface Pool {
  /** The workers alive, by worker id. */
  members: ReadonlyMap<number, Member>;
  /** Forks the first worker of every slot. */
  start(): void;
  /** Forks the slot's next worker after its backoff; returns that wait, in ms. */
  replace(member: Member): number;
  /** No more replacements; SIGTERM to every worker, and SIGKILL to those left after `killAfterMs`. */
  stop(killAfterMs: number): void;
}

function createPool(size: number, logger: Logger, events: PoolEvents): Pool {
  const members = new Map<number, Member>();
  const streaks: number[] = Array.from({ length: size }, () => 0);
  const respawns = new Set<NodeJS.Timeout>();
  let stopped = false;

  function fork(slot: number): void {
    const worker = cluster.fork({ [WORKER_MARK]: '1' });
    const member: Member = { worker, slot, readyAt: 0, waiting: new Map() };
    members.set(worker.id, member);
    worker.on(
      'message',
      (message: unknown) => isMessage(message) && events.message(member, message),
    );
    worker.on('error', (error) =>
      logger.warn({ err: error, worker: worker.id }, 'worker channel error'),
    );
    const exited = (code: number | null, signal: string | null): void => {
      if (members.get(worker.id) !== member) return;
      members.delete(worker.id);
      events.exit(member, code, signal);
    };
    worker.once('exit', (code: number | null, signal: string | null) => {
      // Its last messages (a start-up error) are read before the channel reports closing.
      if (!worker.isConnected()) return exited(code, signal);
      const timer = setTimeout(() => exited(code, signal), 1_000);
      worker.once('disconnect', () => {
        clearTimeout(timer);
        exited(code, signal);
      });
    });
  }

  return {
    members,
    start() {
      for (let slot = 0; slot < size; slot++) fork(slot);
    },
    replace({ slot, readyAt }) {
      const next = backoff(streaks[slot] ?? 0, readyAt > 0 ? Date.now() - readyAt : 0);
      streaks[slot] = next.streak;
      const timer = setTimeout(() => {
        respawns.delete(timer);
        if (!stopped) fork(slot);
      }, next.delayMs);
      respawns.add(timer);
      return next.delayMs;
    },
    stop(killAfterMs) {
      stopped = true;
      for (const timer of respawns) clearTimeout(timer);
      respawns.clear();
      if (members.size === 0) return;
      for (const { worker } of members.values()) worker.process.kill('SIGTERM');
      // A worker stuck past its grace is killed, and the exit code says so.
      setTimeout(() => {
        for (const { worker } of members.values()) worker.process.kill('SIGKILL');
      }, killAfterMs).unref();
    },
  };
}

/** A slot's crash streak after a worker that served `livedMs` died, and the wait before the next. */
function backoff(streak: number, livedMs: number): { streak: number; delayMs: number } {
  const next = livedMs >= STABLE_MS ? 0 : streak + 1;
  return { streak: next, delayMs: Math.min(MAX_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** next) };
}

/** Why start-up failed, from the first worker that exited before it was ready. */
function startupError(member: Member, code: number | null, signal: string | null): string {
  const failure = member.failure;
  const known = failure?.name === 'SettingsError' || failure?.name === 'RulesError';
  return known
    ? failure.message
    : `worker ${member.worker.id} failed to start: ${failure?.message ?? `exit ${code ?? signal}`}`;
}

/** A worker is listening; a SIGHUP it missed while starting is passed on now. */
function workerReady(member: Member, logger: Logger): void {
  const { worker } = member;
  member.readyAt = Date.now();
  logger.info({ worker: worker.id, pid: worker.process.pid }, 'worker ready');
  if (member.reloadPending) {
    member.reloadPending = false;
    worker.process.kill('SIGHUP');
  }
}

/** SIGHUP to every ready worker; one still starting gets it once it is ready. */
function reloadWorkers(members: Iterable<Member>): void {
  for (const member of members) {
    if (member.readyAt > 0) member.worker.process.kill('SIGHUP');
    else member.reloadPending = true;
  }
}

/** The primary's part of the signals (see IGNORED_SIGNALS): it passes them on to its workers. */
function handlePrimarySignals(
  logger: Logger,
  on: { drain(signal: 'SIGTERM' | 'SIGINT'): void; reload(): void },
): void {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => on.drain(signal));
  ignoreSignals(logger);
  process.on('SIGHUP', () => on.reload());
}

/** The cluster's /metrics: every worker's counts summed, with those of workers gone kept in. */
interface ClusterMetrics {
  /** A worker's answer to a `tollgate:collect`. */
  received(member: Member, id: number, snapshot: MetricsSnapshot): void;
  /** Sends a worker the sum, for its /metrics. */
  answer(worker: Worker, id: number): void;
  /** A worker has exited: nothing waits on it any more, and its last counts join the retired sum. */
  retire(member: Member): void;
  countRestart(): void;
}

function createClusterMetrics(members: ReadonlyMap<number, Member>): ClusterMetrics {
  const aggregator = createMetricsAggregator();
  let nextSnapshot = 0;

  /** Every worker's counts, fresh where it answers in time, plus those of workers gone. */
  async function sum(): Promise<Exposition> {
    const id = nextSnapshot++;
    const asked = [...members.values()].filter((m) => m.readyAt > 0);
    await Promise.all(
      asked.map(
        (member) =>
          new Promise<void>((resolve) => {
            const done = (snapshot?: MetricsSnapshot) => {
              clearTimeout(timer);
              member.waiting.delete(id);
              if (snapshot) member.last = snapshot;
              resolve();
            };
            const timer = setTimeout(done, SNAPSHOT_TIMEOUT_MS);
            member.waiting.set(id, done);
            send(member.worker, { type: 'tollgate:collect', id });
          }),
      ),
    );
    // In one step with the retired sum: a worker that exited meanwhile is counted once, there.
    const live = [...members.values()].flatMap((m) => (m.last ? [m.last] : []));
    return aggregator.exposition(live);
  }
  // Every worker's scrapes share one sum, spaced by its cost: a scrape flood does not ask the
  // workers for their counts once per scrape.
  const sharedSum = shareBuilds(sum);

  return {
    received(member, id, snapshot) {
      member.waiting.get(id)?.(snapshot);
    },
    answer(worker, id) {
      void sharedSum().then(
        (exposition) => send(worker, { type: 'tollgate:exposition', id, exposition }),
        (error: unknown) => send(worker, { type: 'tollgate:exposition', id, error: String(error) }),
      );
    },
    retire(member) {
      for (const done of member.waiting.values()) done();
      if (member.last) aggregator.retire(member.last);
    },
    countRestart: () => aggregator.countRestart(),
  };
}

/** Forwards SIGTERM; each worker drains as a lone process does, and the last exit ends this one. */
function drainWorkers(course: Course, pool: Pool, graceMs: number, exit: () => void): void {
  course.stopping = true;
  pool.stop(graceMs + 5_000);
  if (pool.members.size === 0) exit();
}

/** Every worker has exited. */
function exitPrimary(course: Course, logger: Logger): never {
  if (course.startupError !== undefined) {
    logRefusal(course.startupError, process.env);
    process.exit(1);
  }
  logger.info({ exitCode: course.exitCode }, 'workers stopped');
  process.exit(course.exitCode);
}

/** One worker: the service, with the cluster's /metrics, reporting to the primary. */
async function runWorker(): Promise<void> {
  const report = (message: Message, then?: () => void): void => {
    if (process.send) process.send(message, undefined, {}, () => then?.());
    else then?.();
  };
  try {
    const settings = readSettings();
    const logger = createLogger(settings).child({ worker: cluster.worker?.id });
    logProcessWarnings(logger);
    const metrics = createMetrics({
      maxDetailedSeries: settings.metrics.maxDetailedSeries,
      referenceLabels: settings.compatMode === 'reference',
    });

    let nextAsk = 0;
    const asks = new Map<
      number,
      (reply: Extract<Message, { type: 'tollgate:exposition' }>) => void
    >();
    process.on('message', (message: unknown) => {
      if (!isMessage(message)) return;
      if (message.type === 'tollgate:collect') {
        // Unanswered, the primary sums this worker's previous snapshot.
        metrics.snapshot().then(
          (snapshot) => report({ type: 'tollgate:snapshot', id: message.id, snapshot }),
          () => {},
        );
      } else if (message.type === 'tollgate:exposition') {
        asks.get(message.id)?.(message);
      }
    });
    const metricsExposition = () =>
      new Promise<Exposition>((resolve, reject) => {
        const id = nextAsk++;
        const timer = setTimeout(() => {
          asks.delete(id);
          reject(new Error(`the cluster primary did not sum the metrics within 5 s`));
        }, EXPOSITION_TIMEOUT_MS);
        asks.set(id, (reply) => {
          clearTimeout(timer);
          asks.delete(id);
          if (reply.exposition) resolve(reply.exposition);
          else reject(new Error(`the cluster primary could not sum the metrics: ${reply.error}`));
        });
        report({ type: 'tollgate:metrics', id });
      });

    ignoreSignals(logger);
    const service = createService({ settings, logger, metrics, metricsExposition });
    // From the primary, which passes SIGHUP on.
    reloadOnHangup(logger, () => service.reload());
    const started = service.start();
    // Installed before listening, so that a SIGTERM during start-up still ends in a drain.
    let draining = false;
    for (const signal of ['SIGTERM', 'SIGINT'] as const) {
      process.on(signal, () => {
        if (draining) return;
        draining = true;
        logger.info({ signal }, 'draining');
        void started.then(
          () =>
            service.stop().then(
              () => process.exit(0),
              (error: unknown) => exitAfterFailedStop(logger, error),
            ),
          () => {},
        );
      });
    }
    await holdingOpen(started);
    report({ type: 'tollgate:ready' });
  } catch (error) {
    const known = error instanceof SettingsError || error instanceof RulesError;
    const message = known ? error.message : String((error as Error).stack ?? error);
    report({ type: 'tollgate:failed', name: known ? error.name : 'Error', message }, () =>
      process.exit(1),
    );
  }
}

/** A part that failed to close is a bug to log; the drain itself is over, so the process ends. */
function exitAfterFailedStop(logger: Logger, error: unknown): void {
  logger.error({ err: error }, 'stopping failed; exiting');
  process.exit(1);
}
