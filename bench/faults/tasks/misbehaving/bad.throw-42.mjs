export default {
  name: 'bad.throw-42',
  handler() {
    throw 42;
  },
};
