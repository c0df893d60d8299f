export default {
  name: 'bad.timer-throw',
  handler() {
    setTimeout(() => {
      throw new Error('thrown from a timer after the handler returned');
    }, 20);
    return { returned: true };
  },
};
