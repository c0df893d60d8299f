export default {
  name: 'bad.unhandled-rejection',
  handler() {
    Promise.reject(new Error('nobody catches this'));
    return { returned: true };
  },
};
