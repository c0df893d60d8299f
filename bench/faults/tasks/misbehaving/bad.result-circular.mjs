export default {
  name: 'bad.result-circular',
  handler() {
    const o = {};
    o.self = o;
    return o;
  },
};
