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
  const address = await kiln.listen();
  logger.info(
    { address, store: config.store.replace(/\/\/[^@]*@/, '//***@'), threads: config.threads },
    'kiln is serving',
  );
}

void main();
