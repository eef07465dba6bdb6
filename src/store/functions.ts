import type { Cluster, Redis } from 'ioredis';
import { SettingsError, StoreError } from '../core/errors.js';
import { decisionCode, scriptSha, type ScriptName } from './library.js';
import { fcallSender, type FcallSender } from './fcall.js';
import type { ScriptArgs } from './scriptCall.js';

/**
 * How decision calls reach Redis: as functions of tollgate's library (FUNCTION LOAD once, then
 * FCALL), or, where Redis refuses functions, as scripts (EVALSHA, and EVAL after a NOSCRIPT).
 * Both run the same code on the same counters (see library.ts), so the path changes nothing that
 * a check observes, only what each call costs Redis: a script's whole chunk, every helper
 * defined, runs again on every call, and a function's only once, at load.
 *
 * REDIS_FUNCTIONS chooses: `auto` (the default) calls functions where Redis allows them, `on`
 * refuses to start where it does not, `off` always sends scripts. The choice is made once, on the
 * first connection that answers, by loading the library and calling the health probe through it.
 * A Redis without FUNCTION (before 7.0), or a user without +function|load or +fcall, makes `auto`
 * send scripts, and the reason is logged and named on /rlconfig; any other failure (Redis down)
 * leaves the choice for the next connection, and calls go as scripts meanwhile.
 *
 * A library that goes missing (a restart without persistence, FUNCTION FLUSH, a failover to a
 * replica that never had it) is loaded again by the call that finds it missing, which then runs
 * once more, within the same REDIS_TIMEOUT: nothing ran on the first try, so nothing is counted
 * twice. On a cluster it is loaded on the call's own primary, and on every primary only if the
 * call still finds it missing. On a replica, FUNCTION LOAD answers READONLY, as the call would.
 *
 * REDIS_FUNCTIONS=on where no connection answered at start-up, and a later one refuses functions:
 * no call is sent as a script. Calls and the health probe fail with the refusal (kind
 * `permission`, as a command the user may not run), so health says why; each probe chooses again,
 * and once Redis allows functions checks go through them.
 */
export type FunctionsSetting = 'auto' | 'on' | 'off';

/** How calls go now, for the start-up log and /rlconfig. */
export interface CodePath {
  /** 'undecided' until a connection answered the choice; calls go as scripts meanwhile. */
  kind: 'functions' | 'scripts' | 'undecided';
  /** functions: the library's name; scripts: why. */
  detail: string;
}

export interface DecisionCalls {
  /** One call of an entry point: numkeys, KEYS, then ARGV. */
  run(script: ScriptName, args: ScriptArgs): Promise<unknown>;
  /**
   * The health probe's call, on the path calls take: on functions, one FCALL (which loads the
   * library if it is missing); on scripts, EVAL and then EVALSHA, since a user may be granted one
   * and not the other. `send` bounds each.
   */
  probe(args: ScriptArgs, send: Bounded): Promise<unknown[]>;
  /**
   * Chooses the path, unless chosen already, and tells `onPath`. Rejects with a SettingsError when
   * REDIS_FUNCTIONS=on and Redis refuses functions (calls then go as scripts, and say why);
   * resolves when Redis fails otherwise, leaving the choice to the next connection.
   */
  choose(send: Bounded): Promise<void>;
  path(): CodePath;
}

type Bounded = <T>(send: () => Promise<T>) => Promise<T>;

/** Where calls go: one connection, or a cluster that routes each call by its keys. */
export interface CallTarget {
  client: Redis | Cluster;
  /** Every node a library must be loaded on: the connection, or each primary of a cluster. */
  primaries(): Redis[];
  /**
   * On a cluster, the primary a call of these arguments goes to (by its first key's slot), so
   * that a call which finds the library missing loads it there alone, and waits for no other
   * primary (one may be stalled or down). Undefined where it is not known.
   */
  nodeOf?(args: ScriptArgs): Redis | undefined;
}

export function createDecisionCalls(
  target: CallTarget,
  setting: FunctionsSetting,
  onPath?: (path: CodePath) => void,
): DecisionCalls {
  const { scripts, library } = decisionCode();
  const decisionSha = scriptSha(scripts.decision);
  const client = target.client;
  const viaScript = scriptSenders(client, scripts);
  let path: CodePath =
    setting === 'off'
      ? { kind: 'scripts', detail: 'REDIS_FUNCTIONS=off' }
      : { kind: 'undecided', detail: 'no connection has answered yet' };

  const load = singleFlight(() => loadLibrary(target.primaries(), library.code));
  const loadOn = singleFlightEach((node: Redis) => loadLibrary([node], library.code));
  // Two connections' choices at once (start-up, and a 'ready') share one.
  let choosing: Promise<void> | undefined;
  const chooseNow = async (send: Bounded): Promise<void> => {
    const chosen = await tryFunctions(send, load, () =>
      client.call('FCALL', library.functions.decision, 0, 'refund', 0),
    );
    if (chosen === undefined) return;
    let next: CodePath =
      chosen.kind === 'functions' ? { kind: 'functions', detail: library.name } : chosen;
    if (next.kind === 'scripts' && setting === 'on') {
      next = { kind: 'scripts', detail: `REDIS_FUNCTIONS=on, but ${next.detail}` };
    }
    const changed = next.kind !== path.kind || next.detail !== path.detail;
    path = next;
    if (changed) onPath?.(path);
    if (path.kind === 'scripts' && setting === 'on') throw new SettingsError(path.detail);
  };
  // REDIS_FUNCTIONS=on, refused after start-up: why no call goes, as the calls' error.
  const refusedOn = (): StoreError | undefined =>
    setting === 'on' && path.kind === 'scripts'
      ? new StoreError(`redis: ${path.detail}`, 'permission')
      : undefined;
  // Health probes at once share one choice again.
  let rechoosing: Promise<void> | undefined;
  const chooseAgain = (send: Bounded): Promise<void> =>
    (rechoosing ??= chooseNow(send)
      .catch(() => undefined)
      .finally(() => (rechoosing = undefined)));
  const viaFcall: Record<ScriptName, FcallSender> = {
    decision: fcallSender(client, library.functions.decision),
    fixedWindow: fcallSender(client, library.functions.fixedWindow),
  };
  const viaFunction = (script: ScriptName, args: ScriptArgs): Promise<unknown> => {
    const send = viaFcall[script];
    return send(args).catch((error: unknown) =>
      reloadIfMissing(
        error,
        () => send(args),
        () => target.nodeOf?.(args),
        loadOn,
        load,
      ),
    );
  };

  return {
    run(script, args) {
      if (path.kind === 'functions') return viaFunction(script, args);
      const refused = refusedOn();
      return refused ? Promise.reject(refused) : viaScript[script](...args);
    },

    async probe(args, send) {
      if (refusedOn()) {
        await chooseAgain(send);
        const refused = refusedOn();
        if (refused) throw refused;
      }
      if (path.kind === 'functions') return [await send(() => viaFunction('decision', args))];
      const [numKeys, ...rest] = args as [number, ...(string | number)[]];
      const lua = scripts.decision;
      return [
        await send(() => client.eval(lua, numKeys, ...rest)),
        await send(() => client.evalsha(decisionSha, numKeys, ...rest)),
      ];
    },

    choose(send) {
      if (path.kind === 'undecided') {
        choosing ??= chooseNow(send).finally(() => (choosing = undefined));
        return choosing;
      }
      // REDIS_FUNCTIONS=on refused: every later start-up check hears it too.
      if (setting === 'on' && path.kind === 'scripts') {
        return Promise.reject(new SettingsError(path.detail));
      }
      return Promise.resolve();
    },

    path: () => path,
  };
}

/** Each entry point as a script: EVALSHA, and EVAL after a NOSCRIPT (ioredis's defineCommand). */
function scriptSenders(
  client: Redis | Cluster,
  scripts: Record<ScriptName, string>,
): Record<ScriptName, (...args: ScriptArgs) => Promise<unknown>> {
  client.defineCommand('tollgateDecide', { lua: scripts.decision });
  client.defineCommand('tollgateFixedWindow', { lua: scripts.fixedWindow });
  const commands = client as unknown as Record<
    'tollgateDecide' | 'tollgateFixedWindow',
    (...args: ScriptArgs) => Promise<unknown>
  >;
  return {
    decision: commands.tollgateDecide.bind(client),
    fixedWindow: commands.tollgateFixedWindow.bind(client),
  };
}

/**
 * After a call failed with `error`: when it found the library missing, loads it and calls again,
 * on the call's own primary first (`nodeOf`, where known), then on every primary, where the slot
 * map misled (a slot mid-move). Each try that found the library missing ran nothing, so trying
 * again counts nothing twice. Any other error is the call's.
 */
async function reloadIfMissing(
  error: unknown,
  call: () => Promise<unknown>,
  nodeOf: () => Redis | undefined,
  loadOn: (node: Redis) => Promise<void>,
  loadAll: () => Promise<void>,
): Promise<unknown> {
  if (!isMissing(error)) throw error;
  // Asked only now: the failed call may have taught the client a newer slot map (MOVED).
  const node = nodeOf();
  if (node !== undefined) {
    await loadOn(node);
    try {
      return await call();
    } catch (error) {
      if (!isMissing(error)) throw error;
    }
  }
  await loadAll();
  return call();
}

/**
 * Loads the library and makes one call through it that touches no key (a refund of nothing).
 * Resolves with the path they allow, or undefined when Redis failed otherwise (down, loading):
 * that decides nothing.
 */
async function tryFunctions(
  send: Bounded,
  load: () => Promise<void>,
  call: () => Promise<unknown>,
): Promise<CodePath | undefined> {
  try {
    await send(load);
  } catch (error) {
    return refusal(error, 'function|load');
  }
  try {
    await send(call);
  } catch (error) {
    return refusal(error, 'fcall');
  }
  return { kind: 'functions', detail: '' };
}

/** Why Redis refused functions, or undefined when the failure says nothing about them. */
function refusal(error: unknown, command: string): CodePath | undefined {
  const message = error instanceof Error ? error.message : String(error);
  if (/^NOPERM/.test(message) || /can't run this command/.test(message)) {
    return {
      kind: 'scripts',
      detail: `the Redis user may not run '${command}': grant +fcall +function|load to call functions`,
    };
  }
  if (/unknown command|unknown subcommand/i.test(message)) {
    return {
      kind: 'scripts',
      detail: `this Redis has no functions (${firstLine(message)}): Redis 7 or Valkey 7.2 has`,
    };
  }
  return undefined;
}

/** FUNCTION LOAD on each node; a library of that name there already is this very code. */
async function loadLibrary(nodes: readonly Redis[], code: string): Promise<void> {
  if (nodes.length === 0) throw new Error('CLUSTERDOWN no primary known yet');
  await Promise.all(
    nodes.map(async (node) => {
      try {
        await node.call('FUNCTION', 'LOAD', code);
      } catch (error) {
        if (!/already exists/.test((error as Error).message)) throw error;
      }
    }),
  );
}

/** Calls that find the library missing share one load. */
function singleFlight(run: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => {
    running ??= run().finally(() => (running = undefined));
    return running;
  };
}

/** As singleFlight, one flight per node. */
function singleFlightEach(run: (node: Redis) => Promise<void>): (node: Redis) => Promise<void> {
  const running = new Map<Redis, Promise<void>>();
  return (node) => {
    let flight = running.get(node);
    if (flight === undefined) {
      flight = run(node).finally(() => running.delete(node));
      running.set(node, flight);
    }
    return flight;
  };
}

function isMissing(error: unknown): boolean {
  return error instanceof Error && /^ERR Function not found/.test(error.message);
}

function firstLine(text: string): string {
  return text.split('\n', 1)[0] as string;
}

/** The path as the start-up log and /rlconfig name it. */
export function describePath(path: CodePath): string {
  if (path.kind === 'functions') return `functions (FCALL of library ${path.detail})`;
  if (path.kind === 'scripts') return `scripts (EVALSHA): ${path.detail}`;
  return `scripts (EVALSHA) until a connection answers: ${path.detail}`;
}
