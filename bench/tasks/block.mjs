/**
 * `block`: holds its thread for `ms` without using a core (Atomics.wait on a word nobody
 * changes). To the dispatcher it is a job of `ms` running on a core of its own: with many
 * threads of it, a 2-core machine shows what the main thread costs when it hands out work
 * to a machine of many cores (bench/dispatch-ceiling.mjs).
 */
const word = new Int32Array(new SharedArrayBuffer(4));

export default {
  name: 'block',
  handler: ({ ms }) => {
    Atomics.wait(word, 0, 0, ms);
    return null;
  },
};
