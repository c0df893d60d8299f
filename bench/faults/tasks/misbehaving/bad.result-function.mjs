export default { name: 'bad.result-function', handler: () => ({ f: () => 1 }) };
