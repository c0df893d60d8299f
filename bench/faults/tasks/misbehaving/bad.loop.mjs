export default {
  name: 'bad.loop',
  handler() {
    while (true) {
      // never returns
    }
  },
};
