import { ConfigError, loadConfig } from './config.js';
import { createKiln } from './kiln.js';
import { setFlagsFromString } from 'node:v8';

/**
 * How far V8 lets the old generation grow past what its last full collection kept, in
 * percent. By default V8 lets it reach about three times that under a steady stream of
 * submissions: with a million pending jobs the main thread kept 247 MiB alive (the ready
 * index and its copies) in a heap of 777 MiB, and RSS was 922 MiB (bench/README.md, the
 * memory figure). At 50 % the same million pending jobs took 566 MiB of RSS.
 */
const HEAP_GROWING_PERCENT = 50;

/** `npm start`: read the environment, start Kiln, stop it gracefully on SIGTERM/SIGINT. */
async function main(): Promise<void> {
  // An operator's own `node --heap-growing-percent=…` stands.
  if (
    !process.execArgv.some(
      (arg) => arg.startsWith('--heap-growing-percent') || arg.startsWith('--heap_growing_percent'),
    )
  ) {
    setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  }
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`kiln: ${error.message}\n`);
      process.exit(1);
    }
    throw error;
  }
  let kiln: Awaited<ReturnType<typeof createKiln>>;
  try {
    kiln = await createKiln(config);
  } catch (error) {
    process.stderr.write(`kiln: cannot start: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  }
  const { logger } = kiln;
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals += 1;
    if (signals > 1) {
      logger.warn({ signal }, 'second signal: exiting at once; unfinished attempts are recovered at the next start');
      process.exit(1);
    }
    logger.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down: draining running attempts');
    kiln.stop().then(
      () => {
        logger.info('stopped');
        process.exit(0);
      },
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  let address: string;
  try {
    address = await kiln.listen();
  } catch (error) {
    process.stderr.write(`kiln: ${listenFailure(error, config.host, config.port)}\n`);
    await kiln.stop().catch(() => undefined);
    process.exit(1);
  }
  logger.info(
    { address, store: config.store.replace(/\/\/[^@]*@/, '//***@'), threads: config.threads },
    'kiln is serving',
  );
}

/** Why the server could not listen, in one line that names the setting to change. */
function listenFailure(error: unknown, host: string, port: number): string {
  const where = `${host}:${port}`;
  switch ((error as NodeJS.ErrnoException).code) {
    case 'EADDRINUSE':
      return `cannot listen on ${where}: the port is in use by another process (set PORT to a free one, or stop that process)`;
    case 'EACCES':
      return `cannot listen on ${where}: permission denied (ports below 1024 need privileges; set PORT)`;
    case 'EADDRNOTAVAIL':
      return `cannot listen on ${where}: HOST=${JSON.stringify(host)} is not an address of this machine`;
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_NONAME':
      return `cannot listen on ${where}: HOST=${JSON.stringify(host)} does not resolve to an address`;
    default:
      return `cannot listen on ${where}: ${error instanceof Error ? error.message : String(error)}`;
  }
}

void main();
