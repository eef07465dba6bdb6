import { defineConfig } from 'vitest/config';

/**
 * The differential tests against envoyproxy/ratelimit's own server (test/reference): `npm run
 * test:reference`, which builds that server first. They need Go, so `npm test` leaves them out.
 */
export default defineConfig({
  test: {
    include: ['test/reference/**/*.test.ts'],
    globalSetup: ['test/globalSetup.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    pool: 'forks',
    maxWorkers: 2,
  },
});
