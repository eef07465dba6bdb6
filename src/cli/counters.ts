// `tollgate counters`: reads or resets a descriptor's counter in Redis, keyed as the service keys it.
import type { StoreError } from '../core/errors.js';
import { counterEntries } from '../store/keys.js';
import { keyOfCounter } from '../decision/plan.js';
import { explainMatch, whereIs } from '../rules/explain.js';
import { matchRule } from '../rules/match.js';
import { newCounter } from '../decision/counting.js';
import type { Limit } from '../rules/types.js';
import { createRedisStore } from '../store/redisStore.js';
import { NEVER, type CounterCheck } from '../store/Store.js';
import {
  CommandError,
  DESCRIPTOR_HELP,
  environment,
  loadDomain,
  parse,
  parseDescriptor,
  required,
  showEntries,
  UsageError,
  type Command,
} from './args.js';

const usage = `Usage: tollgate counters get|reset [--config PATH] --domain DOMAIN --descriptor K=V[,K=V...]

Finds the Redis counter a descriptor is decided by (its rule's algorithm and window, the
domain's tenant_key, CACHE_KEY_PREFIX), then:
  get    prints the key, the units remaining and the time until reset, consuming nothing;
         or says there is no counter yet
         (a tag or route over 100 bytes appears in the key as # and a hash of it)
  reset  deletes the counter, so the next decision starts fresh, and says whether it existed

Redis is the one the service uses: REDIS_URL and the other REDIS_* settings from the
environment (REDIS_TIMEOUT is raised to at least 1s here). Exits 1 when REDIS_URL is unset,
when no limit applies to the descriptor, or when get finds no counter.

${DESCRIPTOR_HELP}

Options:
  --config PATH         a rules file or directory; default CONFIG_PATH as the service reads it
  --domain DOMAIN       the rules' domain
  --descriptor K=V,...  the descriptor
  -h, --help            Show this help`;

export const counters: Command = {
  name: 'counters',
  summary: "read or reset a descriptor's counter in Redis",
  usage,
  async run(args) {
    const { values, positionals } = parse({
      args,
      options: {
        config: { type: 'string' },
        domain: { type: 'string' },
        descriptor: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      allowPositionals: true,
    });
    if (values.help) {
      console.log(usage);
      return 0;
    }
    const [action, ...extra] = positionals;
    if (action !== 'get' && action !== 'reset') {
      throw new UsageError(
        action === undefined ? 'get or reset is required' : `unknown action '${action}'`,
      );
    }
    if (extra.length > 0) throw new UsageError(`unexpected argument '${extra[0]}'`);
    const domain = required(values.domain, '--domain');
    const entries = parseDescriptor(required(values.descriptor, '--descriptor'));

    const settings = environment();
    if (settings.redis === undefined) {
      throw new CommandError(
        'REDIS_URL is not set: counters live in the Redis the service uses (an in-memory store ' +
          'lives inside its service process and cannot be reached)',
      );
    }
    const rules = loadDomain(values.config, domain);
    const node = matchRule(rules, entries);
    const limit = node?.limit;
    if (node === undefined || limit === undefined) {
      const { reason } = explainMatch(rules, entries);
      throw new CommandError(`${showEntries(entries)} has no counter: ${reason}`);
    }
    const policy = { keyPrefix: settings.cacheKeyPrefix, referenceKeys: !!settings.referenceKeys };
    // As the service keys it; COMPAT_KEYS=reference: in the window this instance's clock is in.
    const key = keyOfCounter(
      policy,
      domain,
      counterEntries(entries, node),
      rules.tenantKey,
      limit,
      Date.now(),
    );

    // A request's bound is too tight for an operator's round trip from elsewhere.
    const redis = { ...settings.redis, timeoutMs: Math.max(settings.redis.timeoutMs, 1_000) };
    let lastError: StoreError | undefined;
    const store = createRedisStore(redis, { onError: (error) => (lastError = error) });
    try {
      await store.ping().catch((error: unknown) => {
        throw lastError ?? error;
      });
      console.log(`key ${JSON.stringify(key)}`);
      if (key.includes('{#') || key.includes('|#')) {
        console.log(
          'hashed: the descriptor is too long to spell out in the key (see docs/redis.md, "Key format and upgrades")',
        );
      }
      console.log(`rule ${whereIs(node)}`);
      if (action === 'reset') {
        const existed = (await store.reset([key])) > 0;
        console.log(existed ? 'reset: the counter existed and is deleted' : 'reset: no counter');
        return 0;
      }
      const capacity = limit.algorithm === 'token_bucket' ? limit.burst : limit.requestsPerUnit;
      if ((await store.exists([key])) === 0) {
        // A check would start its window now: no reset to tell yet.
        console.log('no counter: nothing counted yet, in this window or any');
        console.log(`remaining ${capacity} of ${capacity}`);
        return 1;
      }
      if (settings.referenceKeys) {
        // A plain count, read as the reference reads it; its window ends on this clock.
        const count = Number(await store.access.call((redis) => redis.get(key)));
        const now = Date.now();
        console.log(`remaining ${Math.max(0, limit.requestsPerUnit - count)} of ${capacity}`);
        console.log(`reset in ${(limit.windowMs - (now % limit.windowMs)) / 1000}s`);
        return 0;
      }
      const decision = await store.decide(
        [peekOf(key, limit)],
        settings.clock === 'local' ? Date.now() : undefined,
      );
      const result = decision.results[0];
      if (result === undefined) throw new CommandError('the store returned no result');
      console.log(`remaining ${result.remaining} of ${capacity}`);
      console.log(`reset ${result.resetMs === NEVER ? 'never' : `in ${result.resetMs / 1000}s`}`);
      return 0;
    } finally {
      await store.close();
    }
  },
};

/** Cost 0 checks without consuming; the flags stay off, as for a plain enforced counter. */
function peekOf(key: string, limit: Limit): CounterCheck {
  return { ...newCounter(key, limit, 0, false, false), overdraw: false };
}
