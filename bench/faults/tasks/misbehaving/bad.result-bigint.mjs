export default { name: 'bad.result-bigint', handler: () => ({ n: 1n }) };
