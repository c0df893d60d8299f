import { ConfigError, loadConfig } from './config.js';
import { createKiln } from './kiln.js';

/** `npm start`: read the environment, start Kiln, stop it gracefully on SIGTERM/SIGINT. */
async function main(): Promise<void> {
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
