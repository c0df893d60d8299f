import { brotliDecompressSync } from 'node:zlib';
import { decompressionTask } from '../compression.js';

export default decompressionTask('compress.unbrotli', 'Brotli', (input, maxOutputLength) =>
  brotliDecompressSync(input, { maxOutputLength }),
);
