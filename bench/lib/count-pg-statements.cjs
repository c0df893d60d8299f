/**
 * Preloaded into a Kiln server (`node --require`) by bench/pg-statements.mjs: counts every
 * statement node-postgres's Client sends, by its text (whitespace folded, first 70
 * characters), and writes the counts as JSON to PG_STATEMENTS_OUT when the process exits.
 */
'use strict';
const Module = process.getBuiltinModule('node:module');
const { writeFileSync } = process.getBuiltinModule('node:fs');

const counts = new Map();
const load = Module._load;
let counting = false;
Module._load = function countingLoad(...args) {
  const loaded = load.apply(this, args);
  // pg/lib/client.js exports the Client class: its query() is where every statement goes.
  if (!counting && typeof loaded === 'function' && loaded.name === 'Client' && loaded.prototype?.query) {
    counting = true;
    const query = loaded.prototype.query;
    loaded.prototype.query = function countedQuery(config, ...rest) {
      const text = typeof config === 'string' ? config : config?.text;
      if (typeof text === 'string') {
        const key = text.replace(/\s+/g, ' ').trim().slice(0, 70);
        counts.set(key, (counts.get(key) ?? 0) + 1);
      }
      return query.call(this, config, ...rest);
    };
  }
  return loaded;
};
process.on('exit', () => {
  if (process.env.PG_STATEMENTS_OUT) writeFileSync(process.env.PG_STATEMENTS_OUT, JSON.stringify([...counts]));
});
