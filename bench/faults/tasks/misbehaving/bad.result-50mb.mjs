export default { name: 'bad.result-50mb', handler: () => ({ data: 'x'.repeat(50 * 2 ** 20) }) };
