import { gunzipSync } from 'node:zlib';
import { decompressionTask } from '../compression.js';

export default decompressionTask('compress.gunzip', 'gzip', (input, maxOutputLength) =>
  gunzipSync(input, { maxOutputLength }),
);
