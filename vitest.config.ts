import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Differential tests against the reference server: npm run test:reference.
    exclude: ['test/reference/**', 'node_modules/**'],
    globalSetup: ['test/globalSetup.ts'],
    // Integration tests spawn redis-server and service processes; give them room on a loaded 2-core machine.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
  },
});
