export default {
  name: 'bad.throw-null',
  handler() {
    throw null;
  },
};
