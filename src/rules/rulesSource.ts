import { NoRulesError, RulesError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import { createRulesDumps } from './dumpRules.js';
import { createRulesLoader } from './loadOffThread.js';
import { loadRules, type LoadRulesOptions } from './loadRules.js';
import type { RuleSet } from './types.js';
import { watchRules, type RulesWatcher } from './watchRules.js';
import { startXdsClient, type XdsClient } from './xdsClient.js';
import type { XdsSettings } from './xdsSettings.js';
import { PACKAGE_VERSION } from '../core/version.js';

/**
 * Where the rules in force come from: the rules files, loaded at once and watched, or an xDS
 * management server, whose updates are loaded as they come. Either way one reference is read by
 * every check, and a reload swaps it whole, so no check sees half a configuration. Loads after
 * the first run off the serving thread: parsing a large file takes seconds, which calls must not
 * wait for.
 */
export interface RulesSource {
  /** The rules in force; over xDS, NoRulesError until the first update is applied. */
  current(): RuleSet;
  /** The rules in force, or undefined before the first. */
  loaded(): RuleSet | undefined;
  /** Why health must say NOT_SERVING for want of rules, or undefined. */
  unhealthy(): string | undefined;
  /** What the start-up line names as the source. */
  describe(): string;
  /** Starts watching the files: called last, so nothing that fails after leaves it running. */
  watch(): void;
  /**
   * Over xDS, opens the stream; resolves once the first update is applied, or at once with
   * FORCE_START_WITHOUT_INITIAL_CONFIG. Files: resolves at once.
   */
  start(): Promise<void>;
  /** Loads the files again now, changed or not (SIGHUP); the current rules serve meanwhile. */
  reload(): void;
  /** What GET /rlconfig shows: built once per rules version, on its first request. */
  dump(): Promise<Buffer>;
  close(): void;
}

/** The settings the rule source reads. */
export interface RulesSettings extends LoadRulesOptions {
  /** A rules file or a directory of them, when `xds` is undefined. */
  configPath: string;
  xds: XdsSettings | undefined;
  configPollIntervalMs: number;
  configSettleMs: number;
}

/** What the rule source reports besides its logs: each load's success, and the xDS version. */
export interface RulesEvents {
  configLoad(ok: boolean): void;
  rulesVersion(source: 'xds', version: string): void;
  /** The first rules came into force over xDS. */
  onFirstRules(): void;
}

/** A version as logs and /rlconfig show it: the management server's text, bounded. */
function shortVersion(version: string): string {
  return version.length > 128 ? `${version.slice(0, 128)}…` : version;
}

/** The rule source of the settings; a rules file is loaded now, and its error thrown. */
export function createRulesSource(
  settings: RulesSettings,
  logger: Logger,
  events: RulesEvents,
): RulesSource {
  const loadOptions: LoadRulesOptions = {
    defaultAlgorithm: settings.defaultAlgorithm,
    mergeDomainConfig: settings.mergeDomainConfig,
    referenceKeys: settings.referenceKeys,
  };
  const state: SourceState = {
    rules: undefined,
    loader: createRulesLoader(),
    xdsClient: undefined,
  };
  const xds = settings.xds;
  if (xds === undefined) {
    state.rules = loadRules(settings.configPath, loadOptions);
    events.configLoad(true);
    logger.info(
      { configPath: settings.configPath, domains: [...state.rules.domains.keys()] },
      'rules loaded',
    );
  }
  let watcher: RulesWatcher | undefined;
  const dumps = createRulesDumps(({ lines, body, buildMs }) =>
    logger.info(
      { lines, bytes: body.length, ms: Math.round(buildMs) },
      'rules dump built for /rlconfig',
    ),
  );
  return {
    current() {
      if (state.rules !== undefined) return state.rules;
      throw new NoRulesError(
        `no rate limit configuration is loaded yet: waiting for the xDS management server at ${xds?.serverUrl ?? '?'}`,
      );
    },
    loaded: () => state.rules,
    unhealthy() {
      if (state.rules !== undefined || xds?.healthyWithConfigOnly !== true) return undefined;
      return 'NOT_SERVING: no rate limit configuration is loaded yet (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true)';
    },
    describe: () => (xds ? `xds ${xds.serverUrl} (node ${xds.nodeId})` : settings.configPath),
    watch() {
      if (xds === undefined) watcher = watchFiles(settings, loadOptions, state, logger, events);
    },
    async start() {
      if (xds === undefined) return;
      const first = startXds(xds, loadOptions, state, logger, events);
      if (xds.forceStart) return;
      logger.info(
        { server: xds.serverUrl, nodeId: xds.nodeId },
        'waiting for the first rules from the xds management server before serving ' +
          '(FORCE_START_WITHOUT_INITIAL_CONFIG=true serves at once)',
      );
      await first;
    },
    reload: () => watcher?.reload(),
    async dump() {
      if (xds === undefined) return (await dumps(state.rules, [])).body;
      const applied = state.xdsClient?.version;
      const version = applied === undefined ? 'none yet' : `'${shortVersion(applied)}'`;
      return (await dumps(state.rules, [`# source: xds ${xds.serverUrl}, version ${version}`]))
        .body;
    },
    close() {
      watcher?.close();
      state.xdsClient?.close();
      void state.loader.close();
    },
  };
}

interface SourceState {
  rules: RuleSet | undefined;
  loader: ReturnType<typeof createRulesLoader>;
  xdsClient: XdsClient | undefined;
}

function watchFiles(
  settings: RulesSettings,
  loadOptions: LoadRulesOptions,
  state: SourceState,
  logger: Logger,
  events: RulesEvents,
): RulesWatcher {
  return watchRules({
    path: settings.configPath,
    load: () => state.loader.load({ kind: 'files', configPath: settings.configPath }, loadOptions),
    pollIntervalMs: settings.configPollIntervalMs,
    settleMs: settings.configSettleMs,
    onReload: (next) => {
      state.rules = next;
      events.configLoad(true);
      logger.info({ domains: [...next.domains.keys()] }, 'rules reloaded');
    },
    onError: (error) => {
      events.configLoad(false);
      const failed = 'rules reload failed; the previous rules stay in force';
      // A mistake in the files: its message names the file and the fault, and a stack would only
      // bury it. Anything else is tollgate's own failure, and keeps its stack.
      if (error instanceof RulesError) {
        logger.error({ configPath: settings.configPath, reason: error.message }, failed);
      } else logger.error({ err: error }, failed);
    },
  });
}

/** Starts the xDS client; resolves once the first configuration is applied. */
function startXds(
  xds: XdsSettings,
  loadOptions: LoadRulesOptions,
  state: SourceState,
  logger: Logger,
  events: RulesEvents,
): Promise<void> {
  const inForce = () => {
    const applied = state.xdsClient?.version;
    return applied === undefined ? 'none' : shortVersion(applied);
  };
  return new Promise((resolve) => {
    state.xdsClient = startXdsClient({
      settings: xds,
      version: PACKAGE_VERSION,
      load: async (source) => {
        const next = await state.loader.load(source, loadOptions);
        const inForceDomains = state.rules?.domains.size ?? 0;
        if (xds.refuseEmptyUpdate && next.domains.size === 0 && inForceDomains > 0) {
          throw new Error(
            `the update has no rules, and would remove all ${inForceDomains} domains in force ` +
              '(XDS_REFUSE_EMPTY_UPDATE=true refuses it)',
          );
        }
        return next;
      },
      onApplied: (next, version) => {
        const first = state.rules === undefined;
        const shown = shortVersion(version);
        if (next.domains.size === 0) {
          const dropped = [...(state.rules?.domains.keys() ?? [])];
          logger.warn(
            { version: shown, droppedDomains: dropped.length, dropped: dropped.slice(0, 20) },
            'xds update has no rules: every domain is unlimited until the next one',
          );
        }
        state.rules = next;
        events.configLoad(true);
        events.rulesVersion('xds', shown);
        logger.info({ version: shown, domains: [...next.domains.keys()] }, 'xds rules applied');
        if (first) {
          events.onFirstRules();
          resolve();
        }
      },
      onRejected: (error, version) => {
        events.configLoad(false);
        logger.error(
          { err: error, version: shortVersion(version), inForce: inForce() },
          'xds rules refused (NACK); the previous rules stay in force',
        );
      },
      onStream: ({ connected, error, retryInMs }) => {
        if (connected) logger.info({ server: xds.serverUrl }, 'xds stream open');
        else {
          logger.warn(
            { server: xds.serverUrl, err: error, retryInMs, inForce: inForce() },
            'xds stream lost; serving the rules in force and reconnecting',
          );
        }
      },
    });
  });
}
