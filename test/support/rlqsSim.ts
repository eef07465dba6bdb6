import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/**
 * A fleet of simulated Envoys for tests of tollgate's Rate Limit Quota Service: the Go program in
 * test/rlqs/sim, which plays the client side of Envoy's rate_limit_quota filter, one
 * StreamRateLimitQuotas stream per client. `runSimulation` runs one scenario in real time and
 * resolves with what the clients saw. Times are milliseconds; `at`/`start` fields of the result
 * are epoch milliseconds, and windows start at multiples of `windowMs` since the epoch.
 */

/** A BucketId's map. */
export type BucketId = Record<string, string>;

export interface TokenBucketSpec {
  maxTokens: number;
  /** 1 when absent, as the proto says. */
  tokensPerFill?: number;
  fillIntervalMs: number;
}

/** A rate limit strategy of the filter's configuration. */
export type StrategySpec =
  | { blanket: 'ALLOW_ALL' | 'DENY_ALL'; tokenBucket?: never }
  | { tokenBucket: TokenBucketSpec; blanket?: never };

/** expired_assignment_behavior; `timeoutMs` (expired_assignment_behavior_timeout) is 0 when absent. */
export type ExpiredAssignmentSpec =
  | { reuseLast: true; fallback?: never; timeoutMs?: number }
  | { fallback: StrategySpec; reuseLast?: never; timeoutMs?: number };

export interface SimClient {
  /** With `count` > 1, the clients are named `name#0` .. `name#N-1`. */
  name: string;
  /** Requests go to these buckets in turn. */
  buckets: BucketId[];
  /** Requests a second, evenly spaced. */
  rps: number;
  /** 0..1: each gap between requests is 1/rps, give or take this fraction of it. */
  jitter?: number;
  /** Offsets from the simulation's start; a client that stops closes its stream cleanly. */
  startMs?: number;
  stopMs?: number | null;
  count?: number;
  /** Spreads the starts of the `count` clients evenly over [startMs, startMs + spreadMs). */
  spreadMs?: number;
}

export interface SimScenario {
  /** `127.0.0.1:PORT` of the RLQS server. */
  addr: string;
  domain: string;
  durationMs: number;
  windowMs: number;
  reportingIntervalMs: number;
  /** no_assignment_behavior; allow all when absent. */
  noAssignment?: StrategySpec | null;
  /** expired_assignment_behavior; when absent, an expired bucket is abandoned (see semantics). */
  expiredAssignment?: ExpiredAssignmentSpec | null;
  /**
   * Where rlqs.proto's comments and Envoy's filter code disagree: 'proto' (the default) follows
   * the comments, 'envoy-code' the filter as built (test/rlqs/sim/semantics.go lists how).
   */
  semantics?: 'proto' | 'envoy-code';
  /** false drops the per-client maps (windows' admitted and denied, reconnects); totals stay. */
  perClient?: boolean;
  /** List the assignments that only extended a TTL too; they are otherwise only counted. */
  listUnchanged?: boolean;
  /** How many assignments the result lists at most, the oldest; 1,000 by default. */
  assignmentLimit?: number;
  /** Seeds the jitter. */
  seed?: number;
  clients: SimClient[];
}

export interface SimCounts {
  admitted: number;
  denied: number;
}

export interface SimWindow {
  startMs: number;
  /** The run covered only part of it. */
  partial: boolean;
  /** By client name, every client; absent with `perClient: false`. */
  admitted?: Record<string, number>;
  denied?: Record<string, number>;
  total: SimCounts;
}

export interface SimAssignment {
  atMs: number;
  client: string;
  bucket: BucketId;
  kind: 'blanket' | 'token_bucket' | 'requests_per_time_unit' | 'abandon' | 'unset';
  blanket?: 'ALLOW_ALL' | 'DENY_ALL';
  maxTokens?: number;
  tokensPerFill?: number;
  fillIntervalMs?: number;
  /** Absent when the assignment had no assignment_time_to_live. */
  ttlMs?: number;
  /** false when it only extended the TTL of the same strategy. */
  changed: boolean;
  /** The client skipped it: requests_per_time_unit, or no strategy, as Envoy does. */
  ignored?: boolean;
}

export interface SimStreamError {
  atMs: number;
  client: string;
  /** A gRPC status code name, e.g. UNAVAILABLE; OK when the server ended the stream itself. */
  code: string;
  message: string;
  during: 'open' | 'stream';
}

export interface SimResult {
  semantics: 'proto' | 'envoy-code';
  startMs: number;
  endMs: number;
  /** Every window the run touched, oldest first. */
  windows: SimWindow[];
  /**
   * The changed and the ignored bucket actions (all of them with `listUnchanged`), the oldest
   * `assignmentLimit`; `assignmentCounts` counts every one.
   */
  assignments: SimAssignment[];
  assignmentsUnlisted: number;
  assignmentCounts: { changed: number; unchanged: number; ignored: number };
  reports: {
    /** Reports written to a stream, and reports lost (no stream, or it failed). */
    sent: number;
    dropped: number;
    /** Why they were made: a new bucket, the reporting interval, a changed assignment. */
    immediate: number;
    periodic: number;
    onAssignment: number;
    /** From sending a report to the first response after it on its stream. */
    latencyMs: { p50: number; p99: number; max: number; count: number };
  };
  /** Streams opened again after one ended, by client; absent with `perClient: false`. */
  reconnects?: Record<string, number>;
  reconnectsTotal: number;
  streamErrors: SimStreamError[];
  streamErrorsUnlisted: number;
  ignoredRequestsPerTimeUnit: number;
  /** Actions for buckets the client did not hold, which it ignored. */
  unknownBucketActions: number;
}

const here = fileURLToPath(new URL('../..', import.meta.url));
const built = new Map<string, string>();

/**
 * Builds the simulator once per version of its sources (`scripts/rlqs-sim.mjs`, with goBuild's
 * buildOnce) and returns the binary's path. The first build fetches Go modules: call it from a
 * hook with a long timeout. `root` is the repository's (this checkout's by default; the bench,
 * which runs compiled elsewhere, passes its own).
 */
export function buildRlqsSim(root = here): string {
  const known = built.get(root);
  if (known) return known;
  const build = spawnSync(process.execPath, ['scripts/rlqs-sim.mjs', '--print-binary'], {
    cwd: root,
    encoding: 'utf8',
  });
  if (build.error || build.status !== 0) {
    throw new Error(`building the RLQS simulator failed: ${build.error ?? build.stderr}`);
  }
  const binary = build.stdout.trim();
  built.set(root, binary);
  return binary;
}

// Simulations still running when the test process ends are killed with it.
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

export interface SimRunOptions {
  /** The simulator's binary; buildRlqsSim()'s by default. */
  binary?: string;
  /** Told of the child at once, for a harness that stops its children itself. */
  onSpawn?(child: ChildProcess): void;
}

/** A simulator still running this long after its scenario's end is killed. */
const OVERRUN_MS = 30_000;
/** The simulator's stderr kept for an error's message: its last this many characters. */
const STDERR_KEPT = 4_000;

/**
 * Runs the scenario and resolves with its result; rejects with the simulator's message when it
 * exits non-zero (a scenario it cannot take, or no server at addr), or when it overruns.
 */
export function runSimulation(
  scenario: SimScenario,
  options: SimRunOptions = {},
): Promise<SimResult> {
  const child = spawn(options.binary ?? buildRlqsSim(), [], { stdio: ['pipe', 'pipe', 'pipe'] });
  running.add(child);
  options.onSpawn?.(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-STDERR_KEPT);
  });
  // It may exit before reading a bad scenario; its exit says why.
  child.stdin.on('error', () => {});
  child.stdin.end(JSON.stringify(scenario));
  const deadline = setTimeout(() => child.kill('SIGKILL'), scenario.durationMs + OVERRUN_MS);
  return new Promise<SimResult>((resolve, reject) => {
    child.once('error', (error) => {
      clearTimeout(deadline);
      running.delete(child);
      reject(error);
    });
    // 'close', not 'exit': by then all of its output has been read.
    child.once('close', (code, signal) => {
      clearTimeout(deadline);
      running.delete(child);
      if (code !== 0) {
        reject(new Error(`rlqs-sim exited (${signal ?? code}): ${stderr.trim()}`));
        return;
      }
      try {
        resolve(JSON.parse(stdout) as SimResult);
      } catch {
        reject(new Error(`rlqs-sim wrote no result: ${stdout.slice(0, 200)} ${stderr.trim()}`));
      }
    });
  });
}
