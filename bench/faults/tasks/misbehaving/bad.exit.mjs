export default { name: 'bad.exit', handler: () => process.exit(3) };
