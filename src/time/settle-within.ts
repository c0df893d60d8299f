/** Waits for `work` to settle, but no longer than `ms` of real time (a stop's grace period). */
export async function settleWithin(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const over = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  try {
    await Promise.race([
      work.then(
        () => undefined,
        () => undefined,
      ),
      over,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
