import { readFileSync } from 'node:fs';

/** tollgate's version, from its package.json: `tollgate --version`, and the xDS user agent. */
export const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  }
).version;
