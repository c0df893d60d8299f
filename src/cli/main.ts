#!/usr/bin/env node
import { CommanderError } from 'commander';
import { KilnError } from '../client/index.js';
import { UsageError } from './options.js';
import { buildProgram, EXIT, exitCodeOf } from './program.js';

/** `kiln`: the command line (package.json "bin"). Exit codes are documented in program.ts and the README. */
async function main(): Promise<void> {
  const program = buildProgram(
    {
      stdout: process.stdout,
      stderr: process.stderr,
      readStdin: async () => {
        let text = '';
        process.stdin.setEncoding('utf8');
        for await (const chunk of process.stdin) text += chunk;
        return text;
      },
    },
    (code) => {
      process.exitCode = code;
    },
  );
  try {
    await program.parseAsync(process.argv);
  } catch (error) {
    // Set the code and let the process end by itself, so output still in a pipe is written.
    if (error instanceof CommanderError) {
      process.exitCode = error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    } else if (error instanceof UsageError) {
      process.stderr.write(`kiln: ${error.message}\n`);
      process.exitCode = EXIT.usage;
    } else if (error instanceof KilnError) {
      process.stderr.write(`kiln: ${error.detail}\n`);
      process.exitCode = exitCodeOf(error);
    } else {
      throw error;
    }
  }
}

void main();
