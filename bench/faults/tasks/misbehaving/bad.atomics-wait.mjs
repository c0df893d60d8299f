export default {
  name: 'bad.atomics-wait',
  handler: () => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0),
};
