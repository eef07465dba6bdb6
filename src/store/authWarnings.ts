import type { Redis } from 'ioredis';

/**
 * ioredis prints a few AUTH refusals with console.warn, outside the service's log, then carries on
 * unauthenticated: a password the server does not need, and both a user name and a password for
 * a Redis 5 or older. It has no option or event for them. Here the AUTH of its connect sequence
 * is wrapped on each client: those refusals go to `warn` instead, as one line of the service's
 * log, and ioredis is told AUTH succeeded, which is what it would have done next. Any other
 * refusal (a wrong password) still reaches ioredis, which reports it as a connection error. Each
 * is told once per client (or cluster), not on every reconnect.
 */
const CARRIED_ON: readonly [RegExp, string][] = [
  [
    /no password is set|without any password configured for the default user/,
    'REDIS_URL gives a password, but the Redis server asks for none: it was not used',
  ],
  [
    /wrong number of arguments for 'auth' command/,
    'REDIS_URL gives a user name, which Redis 5 and older do not take: give the password alone',
  ],
];

type AuthCallback = (error?: Error | null, result?: unknown) => void;
type Auth = (...args: unknown[]) => Promise<unknown>;

/** `told`: the warnings already given, shared by the nodes of one cluster. */
export function routeAuthWarnings(
  node: Redis,
  warn: (message: string) => void,
  told = new Set<string>(),
): void {
  const auth = (node.auth as Auth).bind(node);
  (node as unknown as { auth: Auth }).auth = (...args: unknown[]) => {
    const last = args.at(-1);
    if (typeof last !== 'function') return auth(...args);
    const callback = last as AuthCallback;
    return auth(...args.slice(0, -1), (error: Error | null | undefined, result: unknown) => {
      const carried = error
        ? CARRIED_ON.find(([pattern]) => pattern.test(error.message))
        : undefined;
      if (carried) {
        if (!told.has(carried[1])) warn(carried[1]);
        told.add(carried[1]);
        callback(null, 'OK');
      } else {
        callback(error, result);
      }
    });
  };
}
