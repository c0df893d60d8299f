export default { name: 'bad.abort', handler: () => process.abort() };
