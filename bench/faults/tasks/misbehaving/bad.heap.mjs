export default {
  name: 'bad.heap',
  handler() {
    const hoard = [];
    for (;;) hoard.push(new Array(100_000).fill(hoard.length));
  },
};
