import { readFileSync } from 'node:fs';

/** This build's version, from package.json (reported in GET /v1/nodes). */
export const KILN_VERSION: string = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
